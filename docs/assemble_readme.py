"""Assemble README.md from the sections in docs/readme/ (sorted by file name)."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ORDER = ["00-intro.md", "distributed.md", "modules.md", "verify.md", "ecosystem.md", "performance.md"]


def main() -> None:
    folder = os.path.join(HERE, "readme")
    names = sorted(os.listdir(folder), key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    parts = []
    for name in names:
        if name.endswith(".md"):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                parts.append(fh.read().strip() + "\n")
    with open(os.path.join(HERE, "..", "README.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))


if __name__ == "__main__":
    main()
