#!/usr/bin/env bash
# A 3-broker cluster with a replicated topic, a sample stream through it, and its health.
# Safe to re-run: `up` starts only what is not running and the topic is created only once.
set -euo pipefail
cd "$(dirname "$0")/.."

odradek() { .venv/bin/odradek "$@"; }
DIR=./.odradek-demo
BASE_PORT=${ODRADEK_DEMO_BASE_PORT:-9092}
ZK_PORT=${ODRADEK_DEMO_ZK_PORT:-2181}
BOOTSTRAP=127.0.0.1:$BASE_PORT
TOPIC=demo-events
N=1000

echo "== starting 3 brokers and ZooKeeper in $DIR"
odradek up --brokers 3 --data-dir "$DIR" --base-port "$BASE_PORT" --zk-port "$ZK_PORT"

echo "== creating $TOPIC (6 partitions, replication factor 3)"
odradek topics create "$TOPIC" --partitions 6 --replication-factor 3 --if-not-exists --bootstrap-server "$BOOTSTRAP"

echo "== producing $N events (key = user, value = JSON)"
for i in $(seq 1 "$N"); do
  printf 'user-%d\t{"seq": %d, "user": "user-%d", "action": "%s"}\n' \
    $((i % 10)) "$i" $((i % 10)) "$( ((i % 3)) && echo view || echo click)"
done | odradek produce "$TOPIC" --key-separator $'\t' --acks all --bootstrap-server "$BOOTSTRAP"

echo "== consuming $N events from the beginning"
odradek consume "$TOPIC" --from-beginning --max-messages "$N" --bootstrap-server "$BOOTSTRAP" > "$DIR/consumed.txt"
echo "consumed $(wc -l < "$DIR/consumed.txt") events; first 3:"
head -n 3 "$DIR/consumed.txt"

echo "== the same events read by consumer group demo-readers, which commits its offsets"
odradek consume "$TOPIC" --group demo-readers --from-beginning --max-messages "$N" --bootstrap-server "$BOOTSTRAP" > /dev/null
odradek groups describe demo-readers --bootstrap-server "$BOOTSTRAP"

echo "== odradek topics describe $TOPIC"
odradek topics describe "$TOPIC" --bootstrap-server "$BOOTSTRAP"

echo "== odradek status"
odradek status --data-dir "$DIR" || echo "(status exited $?: unhealthy, as said above; the demo goes on)"

echo "== Spark pipeline: page views -> sessionize (Structured Streaming) -> topic + Parquet -> report"
.venv/bin/python -m pipelines.demo --bootstrap-server "$BOOTSTRAP" --work-dir "$DIR/pipeline" 2>&1 \
  | grep -v -e '^WARNING: Using incubator modules' -e '|rdkafka#'

echo
echo "The cluster keeps running. Stop it with: .venv/bin/odradek down --data-dir $DIR"
