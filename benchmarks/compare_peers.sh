#!/usr/bin/env bash
# Side-by-side runs of r2d2-agent and the peer baselines (shared/peers), in the peers'
# protocol: two 1-thread queues at once on the 2-core machine, seeds $SEEDS (default 0 1 2).
#   queue A: r2d2-agent on CartPole-v1, then on the masked CartPole
#   queue B: SB3 DQN (rl-zoo tuned, 50k budget) on CartPole-v1, then sb3-contrib
#            RecurrentPPO on the masked CartPole
# With ACROBOT=1, then Acrobot-v1 (a control task no preset was built on): ours
# (cartpole_config) beside SB3 DQN with rl-zoo's tuned Acrobot settings, 100k env steps,
# through memory_suite.py (two runs at once; about 25 minutes for seeds 0-4).
# Usage: [SEEDS="0 1 2 3 4"] [ACROBOT=1] bash benchmarks/compare_peers.sh [OUTDIR]
#        (needs ../shared/peers and the venv)
set -u
here=$(cd "$(dirname "$0")" && pwd)
peers=${PEERS_DIR:-$here/../../shared/peers}
out=${1:-benchmarks/out/compare}
venv=${PEERS_VENV:-$HOME/.peers-venv}
PY=${PYTHON:-.venv/bin/python}
seeds=${SEEDS:-0 1 2}
mkdir -p "$out"
export SB3_LOGDIR="$out/sb3_logs"  # else SB3 makes a /tmp/SB3-<time> folder per run
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q torch==2.13.0 gymnasium numpy stable-baselines3 sb3-contrib; }
qa() {
  $PY "$here/bench_learning.py" --env cartpole --seeds $seeds --budget 60000 > "$out/r2d2_cartpole.jsonl" 2> "$out/r2d2_cartpole.err"
  $PY "$here/bench_learning.py" --env masked --seeds $seeds --budget 60000 > "$out/r2d2_masked.jsonl" 2> "$out/r2d2_masked.err"
}
qb() {
  for s in $seeds; do MAX_ENV_STEPS=50000 timeout 960 "$venv/bin/python" "$peers/sb3_dqn.py" --seed $s > "$out/sb3_dqn_s$s.log" 2>&1; done
  for s in $seeds; do timeout 960 "$venv/bin/python" "$peers/sb3_rppo.py" --seed $s > "$out/sb3_rppo_s$s.log" 2>&1; done
}
qa & qb & wait
if [ "${ACROBOT:-0}" = 1 ]; then
  $PY "$here/memory_suite.py" suite --tasks acrobot --agents ours:cartpole dqn --seeds $seeds \
    --budget 100000 --jobs 2 --peers-python "$venv/bin/python" --out "$out/acrobot.jsonl" \
    --markdown > "$out/acrobot.md" 2> "$out/acrobot.err"
  cat "$out/acrobot.md"
fi
tail -n 1 "$out"/r2d2_*.jsonl
for f in "$out"/sb3_*.log; do echo "$f: $(tail -n 1 "$f")"; done
