"""`python -m ncclprobe.diagnose.process_env.node_agent --out DIR --job NAME=VALUE ...`: env-check on
one node of a job, started there by `env-check --launcher` (through srun, torchrun or mpirun, as
`ncclprobe.worker` is for a sweep's ranks: a process entry, not a command).

It finds the job's processes on this node (`evidence.live.job_processes`: by the launcher's job id
in their environment, or a piece of their command line), runs env-check on each topmost one as
`env-check --pid` would, with the same expectations, and writes this node's document to the shared
directory (`evidence.live.host_env_checks`, through `ncclprobe.safe_output`: whole or not at all,
never over another node's). Exit 0 when the document is written (a node without the job says so in
it), 2 on bad input, one line.
"""

from __future__ import annotations

import argparse
import sys

from ncclprobe.errors import UsageProblem


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncclprobe.diagnose.process_env.node_agent")
    parser.add_argument("--out", required=True)
    parser.add_argument("--job", action="append", default=[])
    parser.add_argument("--match")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--expect-from")
    parser.add_argument("--all", action="store_true", dest="show_all")
    args = parser.parse_args(argv)
    try:
        path = write_node_document(args)
    except UsageProblem as exc:
        print(f"ncclprobe env-check on this node: {exc}", file=sys.stderr)
        return 2
    print(f"ncclprobe: wrote {path}", file=sys.stderr)
    return 0


def write_node_document(args: argparse.Namespace) -> str:
    from ncclprobe.diagnose.process_env.check import env_check_report
    from ncclprobe.diagnose.process_env.expect import load_recommendation, parse_expect
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.evidence.live.host_env_checks import node_document, node_path
    from ncclprobe.evidence.live.job_processes import JobSelector, job_roots
    from ncclprobe.gather.processes import gather_processes
    from ncclprobe.hosts.identity import host_aliases, host_name
    from ncclprobe.safe_output import write_json

    selector = JobSelector.parse(tuple(args.job), args.match)
    expectations = parse_expect(args.expect)
    if args.expect_from:
        expectations += load_recommendation(args.expect_from)
    host = host_name()
    roots, documents = [], []
    for root in job_roots(selector):
        try:
            processes = gather_processes(root, expectations=expectations, show_all=args.show_all)
        except UsageProblem:  # the process ended between finding it and walking it
            continue
        roots.append(root)
        documents.append(env_check_report(Evidence(processes=processes)).document)
    problem = None if documents else "no process of the job on this host"
    doc = node_document(host, selector.describe(), roots, documents, problem, host_aliases())
    return str(write_json(node_path(args.out, host), doc, what="this node's env-check document"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
