#!/usr/bin/python3
"""Static checks of the Dockerfile and .dockerignore (no Docker engine needed),
and their agreement with the Helm chart (ports, user id).

    /usr/bin/python3 helm/tests/test_dockerfile.py [-v]
"""
import fnmatch
import os
import re
import shlex
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read("Dockerfile")
        cls.ins = instructions(cls.text)
        froms = [i for i, (w, _) in enumerate(cls.ins) if w == "FROM"]
        cls.build = cls.ins[froms[0]:froms[-1]]
        cls.runtime = cls.ins[froms[-1]:]
        cls.global_args = dict(re.match(r"(\w+)=?(.*)", a).groups() for w, a in cls.ins[:froms[0]] if w == "ARG")
        try:
            import yaml
            with open(os.path.join(REPO, "helm", "cacheroute", "values.yaml")) as f:
                cls.values = yaml.safe_load(f)
        except ImportError:  # pragma: no cover - python3-yaml is a dependency
            cls.values = None

    def test_multi_stage_on_debian_12(self):
        froms = [a for w, a in self.ins if w == "FROM"]
        self.assertEqual(len(froms), 2, froms)
        base = self.global_args.get("DEBIAN_IMAGE", "")
        self.assertRegex(base, r"^debian:(12|bookworm)(-slim)?$")
        for f in froms:
            image = f.split()[0].replace("${DEBIAN_IMAGE}", base)
            self.assertRegex(image, r"^debian:(12|bookworm)(-slim)?$")
        self.assertIn("AS build", froms[0])

    def test_build_stage_uses_the_readme_steps(self):
        runs = " ".join(a for w, a in self.build if w == "RUN")
        self.assertIn("scripts/install-deps.sh", runs)
        self.assertRegex(runs, r"cmake -S \. -B build -DCMAKE_BUILD_TYPE=Release")
        self.assertIn("cmake --build build", runs)
        self.assertIn("build/server/cacheroute-sidecar", runs)
        self.assertIn("build/client/cacheroute", runs)

    def test_runtime_package_line(self):
        lines = [l for l in self.text.splitlines() if re.match(r"\s*ARG\s+CR_RUNTIME_PACKAGES=", l)]
        self.assertEqual(len(lines), 1)
        args = [a for w, a in self.runtime if w == "ARG" and a.startswith("CR_RUNTIME_PACKAGES=")]
        self.assertEqual(len(args), 1, "the package ARG belongs to the runtime stage")
        pkgs = shlex.split(args[0].partition("=")[2])[0].split()
        self.assertTrue(pkgs)
        for p in pkgs:
            self.assertRegex(p, r"^[a-z0-9][a-z0-9+.-]+$")
        runs = " ".join(a for w, a in self.runtime if w == "RUN")
        self.assertIn("--no-install-recommends ${CR_RUNTIME_PACKAGES}", runs)
        self.assertIn("rm -rf /var/lib/apt/lists", runs)

    def test_non_root_user_ports_entrypoint(self):
        users = [a for w, a in self.runtime if w == "USER"]
        self.assertTrue(users)
        uid = users[-1].split(":")[0]
        self.assertTrue(uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid")
        self.assertEqual(int(uid), 65532)
        expose = " ".join(a for w, a in self.runtime if w == "EXPOSE").split()
        self.assertIn("50051", expose)
        self.assertIn("9090", expose)
        entry = [a for w, a in self.runtime if w == "ENTRYPOINT"]
        self.assertEqual(entry, ['["cacheroute-sidecar"]'])
        self.assertNotIn("CMD", [w for w, _ in self.runtime])
        self.assertIn("COPY --from=build /out/ /", [f"{w} {a}" for w, a in self.runtime])

    def test_agrees_with_the_chart(self):
        if self.values is None:
            self.skipTest("no PyYAML")
        cr = self.values["cacheroute"]
        user = [a for w, a in self.runtime if w == "USER"][-1].split(":")[0]
        self.assertEqual(int(user), cr["securityContext"]["runAsUser"])
        expose = " ".join(a for w, a in self.runtime if w == "EXPOSE").split()
        self.assertEqual(sorted(int(p) for p in expose),
                         sorted(list(cr["ports"].values()) + [self.values["epp"]["port"]]))
        self.assertEqual(self.values["image"]["repository"].split("/")[-1], "cacheroute-sidecar")

    def test_dockerignore(self):
        patterns = [l.strip() for l in read(".dockerignore").splitlines()
                    if l.strip() and not l.startswith("#")]

        def ignored(path):
            hit = False
            for p in patterns:
                neg = p.startswith("!")
                p = p.lstrip("!").rstrip("/")
                # Docker: a pattern also excludes everything under a match.
                for q in (p, p.replace("**/", "")):
                    if fnmatch.fnmatch(path, q) or fnmatch.fnmatch(path, q + "/*"):
                        hit = not neg
            return hit

        for needed in ("CMakeLists.txt", "planner/planner.c", "proto/CMakeLists.txt",
                       "server/CMakeLists.txt", "client/CMakeLists.txt",
                       "scripts/install-deps.sh", "scripts/deps.txt", "tests/CMakeLists.txt"):
            self.assertFalse(ignored(needed), "%s is needed by the image build" % needed)
        for junk in (".git/config", "build/CMakeCache.txt", "build-helm/x", ".tools/bin/helm",
                     "helm/cacheroute/Chart.yaml"):
            self.assertTrue(ignored(junk), "%s should stay out of the build context" % junk)


if __name__ == "__main__":
    unittest.main(verbosity=2)
