"""What a run reports: one file's outcome (`FileResult`) and the whole run's (`RunResult`, its exit code)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from codemods.records import Finding, RepoFacts


@dataclass
class FileResult:
    path: str
    kind: str
    old_text: str = ""
    new_text: str = ""
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None
    written: bool = False
    launch_notes: List[Dict[str, Any]] = field(default_factory=list)
    exported: Optional[RepoFacts] = None  # pass 1 only: the facts the file publishes
    source_digest: Optional[bytes] = None  # cache.digest of the bytes the result was made from

    @property
    def changed(self) -> bool:
        return self.error is None and self.new_text != self.old_text


@dataclass
class RunResult:
    files: List[FileResult] = field(default_factory=list)
    scanned: int = 0

    @property
    def errors(self) -> List[FileResult]:
        return [f for f in self.files if f.error]

    @property
    def changed(self) -> List[FileResult]:
        return [f for f in self.files if f.changed]

    def open_findings(self) -> List[Tuple[FileResult, Finding]]:
        return [(fr, f) for fr in self.files for f in fr.findings if not f.fixed and not f.ignored]

    def exit_code(self) -> int:
        if self.errors:
            return 2
        if self.changed or self.open_findings():
            return 1
        return 0
