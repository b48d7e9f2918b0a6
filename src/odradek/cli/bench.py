"""`odradek bench produce|latency|consume|failover|shutdown|reassign|groups|ordered|transactions|spark-read`: the arguments and the
output of the benchmarks (the odradek.bench package runs them)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from odradek.cli.args import UserError, positive_int, seconds_arg
from odradek.cli.bootstrap import add_cluster_options, require_broker, use_command_config


def add_commands(sub: Any) -> None:
    """`odradek bench` and its subcommands."""
    be = sub.add_parser("bench", help="benchmarks")
    bsub = be.add_subparsers(dest="bench_command", metavar="SUBCOMMAND", required=True)
    bp = bsub.add_parser("produce", help="producer throughput and latency")
    bp.add_argument("--messages", type=positive_int, default=200_000, metavar="N")
    bp.add_argument("--size", type=positive_int, default=100, help="bytes per message")
    bp.add_argument("--acks", choices=("all", "1"), default="all")
    bp.add_argument("--replication-factor", type=positive_int, default=3, metavar="R")
    bp.add_argument("--partitions", type=positive_int, default=6, metavar="P")
    bp.add_argument("--compare", action="store_true",
                    help="alternate RF3 acks=all and RF1 acks=1 runs on one cluster, each in its own "
                         "process, and print the ratio of the median throughputs")
    bp.add_argument("--security-protocol", choices=("PLAINTEXT", "SASL_SSL"), default="PLAINTEXT",
                    help="with --compare and SASL_SSL: alternate PLAINTEXT and SASL_SSL runs on one private "
                         "cluster with both listeners (librdkafka's default batches) and print their throughput "
                         "ratio and the ACL check's cost per request")
    bp.add_argument("--default-batches", action="store_true",
                    help="librdkafka's default batching instead of megabyte batches")
    bp.add_argument("--rounds", type=positive_int, default=3, metavar="N", help="runs of each kind with --compare")
    bp.add_argument("--keep", action="store_true", help="keep the benchmark's bench-* topics (default: each "
                    "is deleted after its run)")
    bp.add_argument("--json", action="store_true")
    bp.set_defaults(func=cmd_bench_produce)

    bl = bsub.add_parser("latency", help="end-to-end latency (send to receipt, consumer in another process) "
                                         "at fixed rates, RF 3 acks=all")
    bl.add_argument("--rate", type=positive_int, nargs="+", default=[1000, 10_000], metavar="N",
                    help="records/s, one run each (default 1000 10000)")
    bl.add_argument("--seconds", type=positive_int, default=20, metavar="S",
                    help="seconds measured per rate, after the warm-up (default 20)")
    bl.add_argument("--warmup", type=seconds_arg, default=2.0, metavar="S",
                    help="seconds sent first and not measured (default 2)")
    bl.add_argument("--linger-ms", type=float, default=0.0, metavar="MS",
                    help="the producer's linger.ms (default 0: no waiting for a batch; librdkafka's own is 5)")
    bl.add_argument("--keep-dir", type=Path, metavar="DIR",
                    help="run the private cluster in DIR and keep its logs (default: a temp dir, removed)")
    bl.add_argument("--json", action="store_true")
    bl.set_defaults(func=cmd_bench_latency)

    bc = bsub.add_parser("consume", help="consumer throughput (one consumer, three in a group, each in its own "
                                         "process) beside raw Fetch requests")
    bc.add_argument("--records", type=positive_int, default=10_000_000, metavar="N",
                    help="100-byte records produced once and read three ways (default 10,000,000)")
    bc.add_argument("--keep-dir", type=Path, metavar="DIR",
                    help="run the private cluster in DIR and keep its logs (default: a temp dir, removed)")
    bc.add_argument("--json", action="store_true")
    bc.set_defaults(func=cmd_bench_consume)

    bf = bsub.add_parser("failover", help="broker and controller failover time on a private cluster, "
                                          "with the ZooKeeper multi-write floor")
    _add_leadership_options(bf, "failovers of each kind; the medians are reported")
    bf.set_defaults(func=cmd_bench_failover)

    bsd = bsub.add_parser("shutdown", help="controlled shutdown (SIGTERM) on a private cluster: time until "
                                          "the broker's leadership has moved, and until it exits")
    _add_leadership_options(bsd, "shutdowns, each of the broker leading a third; the medians are reported")
    bsd.set_defaults(func=cmd_bench_shutdown)

    bra = bsub.add_parser("reassign", help="partition reassignment on a private cluster of 6 brokers: "
                                          "moving empty partitions, and a throttled move of data")
    bra.add_argument("--partitions", type=positive_int, default=1000, metavar="P",
                     help="empty partitions moved in one AlterPartitionReassignments (default 1000)")
    bra.add_argument("--data-mb", type=positive_int, default=1024, metavar="MB",
                     help="MiB of data in the topic moved under the throttle (default 1024)")
    bra.add_argument("--throttle-mb-per-s", type=float, default=50.0, metavar="MB",
                     help="replication throttle in MiB/s, as odradek reassign --throttle sets it (default 50)")
    bra.add_argument("--timeout-s", type=seconds_arg, default=900.0, help="how long to wait for each step")
    _add_private_cluster_options(bra)
    bra.set_defaults(func=cmd_bench_reassign)

    bg = bsub.add_parser("groups", help="consumer group rebalance, coordinator failover and commit rate "
                                        "on a private cluster")
    bg.add_argument("--members", type=positive_int, default=10, metavar="N")
    bg.add_argument("--partitions", type=positive_int, default=60, metavar="P")
    bg.add_argument("--rounds", type=positive_int, default=3, metavar="N",
                    help="measurements of each kind; the medians are reported (default 3)")
    _add_private_cluster_options(bg)
    bg.set_defaults(func=cmd_bench_groups)

    bo = bsub.add_parser("ordered", help="ordered delivery (KIP-253): throughput against a plain topic, "
                                         "and how long new partitions wait after expansions under load")
    bo.add_argument("--records", type=positive_int, default=300_000, metavar="N",
                    help="keyed records produced and read back per run (default 300,000)")
    bo.add_argument("--size", type=positive_int, default=100, help="bytes per record")
    bo.add_argument("--expansions", type=positive_int, default=8, metavar="N",
                    help="partitions added one at a time under load (default 8)")
    bo.add_argument("--rate", type=positive_int, default=2000, metavar="R",
                    help="records/s produced during the expansions (default 2000)")
    _add_private_cluster_options(bo)
    bo.set_defaults(func=cmd_bench_ordered)

    bt = bsub.add_parser("transactions", help="transactional producers against idempotent ones at commit "
                                              "intervals of 10, 100 and 1000 ms, and read_committed latency")
    bt.add_argument("--seconds", type=positive_int, default=5, metavar="S",
                    help="seconds per measured run (default 5)")
    bt.add_argument("--size", type=positive_int, default=1024, help="bytes per record (default 1024)")
    bt.add_argument("--rate", type=positive_int, default=1000, metavar="R",
                    help="records/s of the latency run (default 1000)")
    _add_private_cluster_options(bt)
    bt.set_defaults(func=cmd_bench_transactions)

    bs = bsub.add_parser("spark-read", help="rows/s reading a topic through Spark vs a plain consumer")
    bs.add_argument("--records", type=positive_int, default=1_000_000, metavar="N")
    bs.add_argument("--size", type=positive_int, default=100, help="bytes per record")
    bs.add_argument("--partitions", type=positive_int, default=6, metavar="P")
    bs.add_argument("--master", default="local[2]", help="Spark master URL")
    bs.add_argument("--json", action="store_true")
    bs.set_defaults(func=cmd_bench_spark_read)
    for parser in (bp, bs, bl, bc):
        add_cluster_options(parser.add_mutually_exclusive_group(),
                            "the cluster to measure (default: a private 3-broker cluster)",
                            "measure the cluster `odradek up` runs in DIR", settings_to=parser)


def _add_leadership_options(parser: argparse.ArgumentParser, rounds_help: str) -> None:
    """The options bench failover and bench shutdown share, each parser its own actions:
    argparse's parents= shares the action objects, and its conflict_handler="resolve" then
    stripped --rounds from the parent's, which became a positional N."""
    parser.add_argument("--partitions", type=positive_int, default=10_000, metavar="P")
    parser.add_argument("--brokers", type=positive_int, default=3, metavar="N")
    parser.add_argument("--timeout-s", type=seconds_arg, default=600.0, help="how long to wait for each step")
    parser.add_argument("--rounds", type=positive_int, default=3, metavar="N", help=rounds_help)
    _add_private_cluster_options(parser)


def _add_private_cluster_options(parser: argparse.ArgumentParser) -> None:
    """--keep-dir and --json of the benchmarks that run a private cluster of their own."""
    parser.add_argument("--keep-dir", type=Path, metavar="DIR",
                        help="run the cluster in DIR and keep its logs (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true")


def _measured_cluster(args: argparse.Namespace) -> str | None:
    """--bootstrap-server, else every broker of --data-dir's cluster, else None (the benchmark
    starts a private cluster); checked to answer before the run. --command-config (or the data
    dir's admin settings) are the clients' security settings."""
    use_command_config(args)
    bootstrap = args.bootstrap_server
    if args.cluster_dir is not None:
        from odradek.cluster.local_cluster import LocalCluster

        bootstrap = LocalCluster.load(args.cluster_dir).bootstrap_servers
    require_broker(bootstrap)
    return bootstrap


def cmd_bench_produce(args: argparse.Namespace) -> None:
    from odradek.bench.produce import run_produce_command

    if args.security_protocol != "PLAINTEXT":
        if not args.compare or args.bootstrap_server or args.cluster_dir:
            raise UserError("--security-protocol SASL_SSL measures a private cluster of its own with --compare "
                            "(give --compare, and no --bootstrap-server or --data-dir)")
        from odradek.bench.security import run_security_compare

        print(run_security_compare(messages=args.messages, size=args.size, acks=args.acks,
                                   replication_factor=args.replication_factor, partitions=args.partitions,
                                   rounds=args.rounds, as_json=args.json))
        return
    print(run_produce_command(_measured_cluster(args), messages=args.messages, size=args.size, acks=args.acks,
                              replication_factor=args.replication_factor, partitions=args.partitions,
                              compare=args.compare, as_json=args.json, rounds=args.rounds, keep=args.keep,
                              default_batches=args.default_batches))


def cmd_bench_spark_read(args: argparse.Namespace) -> None:
    from odradek.bench.spark_read import format_result, run_spark_read

    print(format_result(run_spark_read(_measured_cluster(args), args.records, args.size, args.partitions,
                                       args.master), args.json))


def cmd_bench_failover(args: argparse.Namespace) -> None:
    from odradek.bench import failover as bench_failover

    _leadership_bench(args, bench_failover.run_failover_bench, bench_failover.format_result)


def cmd_bench_shutdown(args: argparse.Namespace) -> None:
    from odradek.bench import shutdown as bench_shutdown

    _leadership_bench(args, bench_shutdown.run_shutdown_bench, bench_shutdown.format_result)


def cmd_bench_reassign(args: argparse.Namespace) -> None:
    from odradek.bench import reassign as bench_reassign

    if args.throttle_mb_per_s <= 0:
        raise UserError("bench reassign: --throttle-mb-per-s must be positive")
    result = bench_reassign.run_reassign_bench(args.partitions, args.data_mb, args.throttle_mb_per_s,
                                               timeout=args.timeout_s, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else bench_reassign.format_result(result))


def _leadership_bench(args: argparse.Namespace, run: Any, format_result: Any) -> None:
    """bench failover and bench shutdown: the same options, a private cluster of --brokers."""
    if args.brokers < 2:
        raise UserError(f"bench {args.bench_command}: --brokers must be at least 2")
    result = run(args.partitions, args.brokers, timeout=args.timeout_s, keep_dir=args.keep_dir,
                 rounds=args.rounds)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_ordered(args: argparse.Namespace) -> None:
    from odradek.bench.ordered import format_result, run_ordered_bench

    result = run_ordered_bench(args.records, args.size, expansions=args.expansions, rate=args.rate,
                               keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_transactions(args: argparse.Namespace) -> None:
    from odradek.bench.transactions import format_result, run_transactions_bench

    result = run_transactions_bench(args.seconds, args.size, args.rate, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_groups(args: argparse.Namespace) -> None:
    from odradek.bench.groups import format_result, run_groups_bench

    result = run_groups_bench(args.members, args.partitions, rounds=args.rounds, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_latency(args: argparse.Namespace) -> None:
    from odradek.bench.latency import format_result, run_latency_bench

    result = run_latency_bench(_measured_cluster(args), args.rate, float(args.seconds), args.warmup,
                               keep_dir=args.keep_dir, linger_ms=args.linger_ms)
    print(json.dumps(result) if args.json else format_result(result))


def cmd_bench_consume(args: argparse.Namespace) -> None:
    from odradek.bench.consume import format_result, run_consume_bench

    result = run_consume_bench(_measured_cluster(args), args.records, keep_dir=args.keep_dir)
    print(json.dumps(result) if args.json else format_result(result))
