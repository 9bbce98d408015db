#!/usr/bin/env bash
# The figures of docs/benchmarks.md, A B A B: the servers of two source trees (e.g. a
# worktree of an older commit and this one), one server at a time, one bench client (B's).
#   scripts/bench_ab.sh A_SRC B_SRC OUTDIR [PARTS...]   PARTS: gateway ref sse8 hop idle
#   ROUNDS=N (alternations, default 2); EXTRA_A / EXTRA_B: more `tokenpipe serve` flags
#   for A's / B's servers (e.g. EXTRA_A="--determinism fast"; give the same tree twice as
#   two different paths, src and ./src). hop needs tcpdump and taskset; sse8 and hop need
#   llama-server (scripts/build-llama-server.sh). Prints one line per run; read OUTDIR.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=$1; B=$2; OUT=$3; shift 3
PARTS=${*:-gateway ref sse8 hop idle}
PY=${PY:-$ROOT/.venv/bin/python}
BENCH="env PYTHONPATH=$B $PY -m tokenpipe bench"
LLAMA=${LLAMA_SERVER:-$HOME/.cache/tokenpipe/llama-server-0.3.36/llama-server}
MODEL=$($PY -c "from tokenpipe.engines.base import bundled_model_path as p; print(p())")
mkdir -p $OUT
serve() { # src port args... -> pid
  local src=$1 port=$2; shift 2
  local extra=$([ $src = $A ] && echo "${EXTRA_A:-}" || echo "${EXTRA_B:-}")
  PYTHONPATH=$src $PY -m tokenpipe serve --port $port --log-level warning $extra "$@" >$OUT/serve-$port.log 2>&1 &
  echo $!
}
ready() { for _ in $(seq 120); do curl -sf localhost:$1/health >/dev/null && return 0; sleep 0.5; done; return 1; }
stop() { kill $1 2>/dev/null; wait $1 2>/dev/null; }
for part in $PARTS; do
 for round in $(seq ${ROUNDS:-2}); do
  for side in A B; do
   src=${!side}; tag="$part-$side-$round"; o=$([ $side = B ] && echo 10 || echo 0)
   case $part in
    gateway)
      p=$(serve $src $((18100+o)) --engine fake --parallel 128); ready $((18100+o))
      $BENCH --url ws://127.0.0.1:$((18100+o))/ws -n 100 --procs 2 --prompt "[[tokens=3000]][[pace_ms=1]]" --max-tokens 3000 --warmup 1 --rounds 2 >$OUT/$tag.txt 2>&1
      stop $p;;
    ref)
      p=$(serve $src $((18101+o)) --threads 2); ready $((18101+o))
      $BENCH --url ws://127.0.0.1:$((18101+o))/ws --reference llama-cpp-python --rounds 4 --max-tokens 128 >$OUT/$tag.txt 2>&1
      stop $p;;
    sse8)
      $LLAMA -m $MODEL -t 2 -c 8192 -np 8 --port 18090 >$OUT/llama-$tag.log 2>&1 & lp=$!
      p=$(serve $src $((18102+o)) --threads 2); ready $((18102+o)); ready 18090
      $BENCH --api sse --url http://127.0.0.1:$((18102+o)) --compare http://127.0.0.1:18090 -n 8 --max-tokens 128 --rounds 4 --warmup 1 >$OUT/$tag.txt 2>&1
      stop $p; stop $lp;;
    hop)
      taskset -c 1 $LLAMA -m $MODEL -t 1 -c 8192 -np 8 --port 18090 >$OUT/llama-$tag.log 2>&1 & lp=$!
      ready 18090
      p=$(PYTHONPATH=$src taskset -c 0 $PY -m tokenpipe serve --engine openai --upstream http://127.0.0.1:18090 --port $((18091+o)) --log-level warning >$OUT/serve-hop.log 2>&1 & echo $!); ready $((18091+o))
      tcpdump -i lo -s 1024 -B 32768 -w $OUT/$tag.pcap "tcp port 18090 or tcp port $((18091+o))" >/dev/null 2>&1 & tp=$!
      sleep 1
      taskset -c 0 $BENCH --api sse --url http://127.0.0.1:$((18091+o)) --compare http://127.0.0.1:18090 -n 8 --max-tokens 128 --rounds 6 --warmup 1 >$OUT/$tag.txt 2>&1
      sleep 1; kill $tp; wait $tp 2>/dev/null
      PYTHONPATH=$B $PY $ROOT/scripts/hop_wire.py $OUT/$tag.pcap --proxy-port $((18091+o)) --upstream-port 18090 --skip 2 >>$OUT/$tag.txt 2>&1
      rm -f $OUT/$tag.pcap
      stop $p; stop $lp;;
    idle)
      p=$(serve $src $((18103+o)) --engine fake); ready $((18103+o))
      $BENCH --url ws://127.0.0.1:$((18103+o))/ws --idle 1000 >$OUT/$tag.txt 2>&1
      stop $p;;
   esac
   echo "$(date +%T) $tag done"
  done
 done
done
