"""Shared test support (moved from tests/study/pair_audit/test_repeats.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

USERS = {"A": 11, "B": 12}


PROJECTS = {"A": 1, "B": 2}


class FakeServers:
    """Label Studio as the push sees it: projects that import tasks (fresh ids) by key."""

    def __init__(self) -> None:
        self.projects: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        self.next_id = 500

    def import_tasks(self, client, project_id, tasks, *, key, progress=None):  # type: ignore[no-untyped-def]
        have = {d[key] for _, d in self.projects[project_id]}
        for t in tasks:
            if t[key] not in have:
                self.next_id += 1
                self.projects[project_id].append((self.next_id, dict(t)))
        return {d[key]: i for i, d in self.projects[project_id]}

    def export_tasks(self, client, project_id):  # type: ignore[no-untyped-def]
        """The project's tasks as Label Studio's export lists them (id and data)."""
        return [{"id": i, "data": dict(d)} for i, d in self.projects[project_id]]
