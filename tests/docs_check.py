"""The reference in docs/ against the code: every flag the built
cacheroute-sidecar lists in --help, and every rpc of the wire contract, must
be named on some page of docs/. A flag counts as named where `--name` appears
not followed by more of a flag's characters; an RPC where `Name` appears in
backticks or as a heading. Fails naming each one missing.

  docs_check.py --sidecar PATH --proto PATH --docs DIR"""
import argparse
import glob
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True


def help_flags(sidecar):
    """The flags of --help: its option rows, and the usage's --check-config."""
    out = subprocess.run([sidecar, "--help"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    flags = re.findall(r"^  (--[a-z0-9][a-z0-9-]*)(?=\s)", out, re.M)
    if not flags:
        sys.exit("docs_check: no flag rows in %s --help" % sidecar)
    flags += [f for f in re.findall(r"--check-config", out)[:1] if f not in flags]
    return flags


def proto_rpcs(proto):
    with open(proto, encoding="utf-8") as f:
        rpcs = re.findall(r"^\s*rpc\s+([A-Za-z0-9_]+)\s*\(", f.read(), re.M)
    if not rpcs:
        sys.exit("docs_check: no rpc in %s" % proto)
    return rpcs


def docs_text(folder):
    pages = sorted(glob.glob(os.path.join(folder, "*.md")))
    if not pages:
        sys.exit("docs_check: no page in %s" % folder)
    text = ""
    for p in pages:
        with open(p, encoding="utf-8") as f:
            text += f.read() + "\n"
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sidecar", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--docs", required=True)
    a = ap.parse_args()
    text = docs_text(a.docs)
    missing = []
    for flag in help_flags(a.sidecar):
        if not re.search(re.escape(flag) + r"(?![a-z0-9-])", text):
            missing.append("flag %s (in --help) is in no page of %s" % (flag, a.docs))
    for rpc in proto_rpcs(a.proto):
        named = "`%s`" % rpc in text or re.search(r"^#+ +%s *$" % re.escape(rpc), text, re.M)
        if not named:
            missing.append("rpc %s (in %s) is in no page of %s" % (rpc, a.proto, a.docs))
    for m in missing:
        print("docs_check: " + m)
    if missing:
        sys.exit(1)
    print("docs_check: every flag of --help and every rpc of the proto is in docs/")


if __name__ == "__main__":
    main()
