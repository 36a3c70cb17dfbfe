#!/usr/bin/env python3
"""Write the third-party notices of pg_workfence's library.

usage: packaging/third_party.py SOURCE_DIR OUTPUT_FILE

The library links the Rust crates it depends on (pgrx, uuid, thiserror, the
standard library's own dependencies are Rust's). Their licences (MIT,
Apache-2.0, ...) ask that their notices travel with the binary, so
scripts/package.sh puts this file in the .deb's doc directory and in the
tarball. It lists every crate reached from `pg_workfence` through normal
(not dev, not build) dependencies for x86-64 Linux, per `cargo metadata`,
with its licence expression and the text of each LICENSE*/COPYING*/NOTICE*
file the crate ships (a text already shown is referred to, not repeated). Proc-macro crates run only at compile time; they are
listed all the same (a notice too many costs nothing).
"""
import json
import os
import subprocess
import sys


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2])
        return 0 if len(sys.argv) == 2 else 2
    source, output = sys.argv[1], sys.argv[2]
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked",
             "--filter-platform", "x86_64-unknown-linux-gnu"],
            cwd=source, check=True, capture_output=True, text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"]
                if p["name"] == "pg_workfence" and p["source"] is None)
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    crates = sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))
    lines = [
        "Third-party notices for pg_workfence's library (pg_workfence.so).",
        "It statically links these Rust crates, and the Rust standard library",
        "(MIT OR Apache-2.0, https://github.com/rust-lang/rust); each crate's licence",
        "and notices follow.",
        "",
    ]
    for p in crates:
        lines.append(f"{p['name']} {p['version']}: {p.get('license') or p.get('license_file') or 'unknown'}")
    first_with = {}  # a licence text -> the crate that showed it first
    for p in crates:
        directory = os.path.dirname(p["manifest_path"])
        texts = sorted(f for f in os.listdir(directory)
                       if f.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE")))
        lines += ["", "=" * 72, f"{p['name']} {p['version']} ({p.get('license') or 'see below'})",
                  p.get("repository") or "", "=" * 72]
        for name in texts:
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read().rstrip()
                earlier = first_with.setdefault(text, f"{p['name']} {p['version']}, {name}")
                if earlier.startswith(f"{p['name']} {p['version']}, "):
                    lines += ["", f"--- {name} ---", text]
                else:
                    lines += ["", f"--- {name}: the same text as {earlier}, above ---"]
        if not texts:
            lines.append("(the crate ships no licence file; its licence is the expression above)")
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{output}: {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
