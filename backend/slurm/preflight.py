"""Before a Slurm run is created: would the cluster take this job, and could it ever run?

Slurm itself is not consistent about a request it can never satisfy: on an idle cluster
sbatch refuses one ("Requested node configuration is not available"), on a busy one it takes
the job and leaves it PENDING for ever ("PartitionConfig"); with its default
EnforcePartLimits=NO a time limit above the partition's is taken and left pending too. So
RocBoard compares the request with the partition's and its nodes' own figures first
(`scontrol show partition|node`), then asks `sbatch --test-only` (which also checks what only
slurmctld knows: accounts, QOS, reservations), and turns each refusal into a finding that
names the limit and the fix. Nothing is created until all of this passes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from backend.config.placement import SlurmPlacement
from backend.findings import Finding
from backend.slurm.client import SlurmClient, SlurmProblem
from backend.slurm.parse import Node, Partition, SbatchRefusal, format_time_limit

CLUSTER_FACTS_TTL_S = 30.0  # partitions and nodes change rarely; a Start may use a 30 s old view


@dataclass(frozen=True)
class ClusterFacts:
    partitions: list[Partition]
    nodes: list[Node]
    problem: SlurmProblem | None = None


class ClusterFactsCache:
    """`scontrol show partition` / `show node`, asked at most every CLUSTER_FACTS_TTL_S."""

    def __init__(self, client: SlurmClient, ttl_s: float = CLUSTER_FACTS_TTL_S):
        self.client = client
        self.ttl_s = ttl_s
        self._facts: ClusterFacts | None = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self) -> ClusterFacts:
        with self._lock:
            if self._facts is not None and time.monotonic() - self._at < self.ttl_s:
                return self._facts
            partitions, problem = self.client.partitions()
            nodes, node_problem = ([], None) if problem else self.client.nodes()
            facts = ClusterFacts(partitions, nodes, problem or node_problem)
            if facts.problem is None:
                self._facts, self._at = facts, time.monotonic()
            return facts


def problem_finding(problem: SlurmProblem, key: str = "run_on") -> Finding:
    return Finding.of(key, problem.rule, **problem.params())


def refusal_finding(refusal: SbatchRefusal, placement: SlurmPlacement, partitions: list[Partition]) -> Finding:
    """sbatch's refusal as a finding under the form field it is about."""
    keys = {
        "slurm-bad-partition": "slurm_partition",
        "slurm-bad-account": "slurm_account",
        "slurm-bad-qos": "slurm_extra",
        "slurm-bad-time": "slurm_time",
        "slurm-bad-gpus": "slurm_gpus_per_node",
        "slurm-too-much-memory": "slurm_mem",
        "slurm-bad-nodes": "slurm_nodes",
        "slurm-no-such-node": "slurm_cpus_per_task",
    }
    choices = ", ".join(p.name for p in partitions) or "?"
    return Finding.of(
        keys.get(refusal.rule, "run_on"),
        refusal.rule,
        detail=refusal.detail,
        partition=refusal.value or placement.partition or "?",
        account=placement.account or "?",
        choices=choices,
    )


def _partition_of(placement: SlurmPlacement, partitions: list[Partition]) -> Partition | None:
    if placement.partition:
        return next((p for p in partitions if p.name == placement.partition), None)
    return next((p for p in partitions if p.default), None)


def fit_findings(placement: SlurmPlacement, facts: ClusterFacts) -> list[Finding]:
    """The request against the partition's limits and its nodes' sizes (no command run)."""
    findings: list[Finding] = []
    add = findings.append
    if not facts.partitions:
        return findings  # a cluster that shows none: sbatch --test-only has the word
    partition = _partition_of(placement, facts.partitions)
    choices = ", ".join(p.name for p in facts.partitions)
    if partition is None:
        if placement.partition:
            add(Finding.of("slurm_partition", "slurm-bad-partition", detail="", partition=placement.partition, choices=choices, account="?"))
        else:
            add(Finding.of("slurm_partition", "slurm-no-default-partition", choices=choices))
        return findings
    if partition.state and partition.state != "UP":
        add(Finding.of("slurm_partition", "slurm-partition-not-up", severity="warning", partition=partition.name, state=partition.state))
    limit = placement.time_limit_s
    if limit is not None and partition.max_time_s is not None and limit > partition.max_time_s:
        most = format_time_limit(partition.max_time_s)
        add(Finding.of("slurm_time", "slurm-time-over-partition", patch={"slurm_time": most}, asked=placement.time_limit, most=most, partition=partition.name))
    most_nodes = min(n for n in (partition.total_nodes, partition.max_nodes) if n is not None) if (partition.total_nodes or partition.max_nodes) else None
    if most_nodes is not None and placement.nodes > most_nodes:
        add(Finding.of("slurm_nodes", "slurm-too-many-nodes", patch={"slurm_nodes": most_nodes}, asked=placement.nodes, most=most_nodes, partition=partition.name))
    members = [node for node in facts.nodes if partition.name in node.partitions]
    if not members:
        return findings
    for key, asked, sizes, rule in (
        ("slurm_gpus_per_node", placement.gpus_per_node, [node.gpus for node in members], "slurm-too-many-gpus"),
        ("slurm_cpus_per_task", placement.cpus_per_task, [node.cpus for node in members if node.cpus is not None], "slurm-too-many-cpus"),
        ("slurm_mem", placement.memory_mb or 0, [node.memory_mb for node in members if node.memory_mb is not None], "slurm-too-much-memory-node"),
    ):
        if asked and sizes and asked > max(sizes):
            patch = {key: max(sizes) if key != "slurm_mem" else f"{max(sizes)}M"}
            add(Finding.of(key, rule, patch=patch, asked=placement.memory if key == "slurm_mem" else asked, most=max(sizes), partition=partition.name))
    if not findings:
        big_enough = [
            node for node in members
            if node.gpus >= placement.gpus_per_node
            and (node.cpus is None or node.cpus >= placement.cpus_per_task)
            and (node.memory_mb is None or node.memory_mb >= (placement.memory_mb or 0))
        ]  # fmt: skip
        if len(big_enough) < placement.nodes:
            add(Finding.of("slurm_nodes", "slurm-not-enough-such-nodes", asked=placement.nodes, have=len(big_enough), partition=partition.name))
    return findings


def preflight(client: SlurmClient, facts: ClusterFactsCache, placement: SlurmPlacement, script: str, cwd: Path) -> list[Finding]:
    """Every reason the cluster would not take (or never run) the job; [] when it would."""
    missing = client.missing()
    if missing:
        return [Finding.of("run_on", "slurm-missing", command=missing, detail="")]
    known = facts.get()
    if known.problem is not None:
        return [problem_finding(known.problem)]
    findings = fit_findings(placement, known)
    if any(f.severity == "problem" for f in findings):
        return findings
    refusal, problem = client.test_only(script, cwd)
    if problem is not None:
        return findings + [problem_finding(problem)]
    if refusal is not None:
        return findings + [refusal_finding(refusal, placement, known.partitions)]
    return findings


__all__ = ["CLUSTER_FACTS_TTL_S", "ClusterFacts", "ClusterFactsCache", "fit_findings", "preflight", "problem_finding", "refusal_finding"]
