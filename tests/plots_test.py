#!/usr/bin/python3
"""scripts/plots: draws valid PNGs from `abf bench --json` outputs of this
build (tiny runs: l2, one repetition, one thread) and from the committed
docs/data files, teaches with --help, and names the file it cannot read.

Run by CTest (tests/CMakeLists.txt, label unit) with ABF_CLI and
ABF_SOURCE_DIR set; exits 77 (skipped) with the reason when matplotlib is
missing (Debian: python3-matplotlib, which scripts/setup installs).
"""

import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

SOURCE = os.environ.get("ABF_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOTS = os.path.join(SOURCE, "scripts", "plots")
ABF = os.environ.get("ABF_CLI", os.path.join(SOURCE, "build", "abf"))


def check_png(test, path):
    """A PNG whose every chunk's CRC holds, from IHDR to IEND, of a sane size."""
    with open(path, "rb") as handle:
        data = handle.read()
    test.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", path)
    at, kinds = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind = data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        test.assertEqual(zlib.crc32(kind + body) & 0xFFFFFFFF, crc, f"{path}: {kind} CRC")
        kinds.append(kind)
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            test.assertTrue(200 <= width <= 4000 and 200 <= height <= 4000, (path, width, height))
        at += 12 + length
    test.assertEqual(kinds[0], b"IHDR", path)
    test.assertEqual(kinds[-1], b"IEND", path)
    test.assertIn(b"IDAT", kinds, path)
    # The whole image data inflates (a truncated or garbled file would not).
    zlib.decompress(b"".join(
        data[i + 8:i + 8 + struct.unpack(">I", data[i:i + 4])[0]]
        for i in chunk_offsets(data) if data[i + 4:i + 8] == b"IDAT"))


def chunk_offsets(data):
    at = 8
    while at < len(data):
        yield at
        at += 12 + struct.unpack(">I", data[at:at + 4])[0]


def plots(*arguments):
    return subprocess.run([sys.executable, PLOTS, *arguments], capture_output=True, text=True,
                          timeout=300)


class PlotsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory(prefix="abf-plots-")
        cls.dir = cls.folder.name
        # Two tiny runs of this build, as if from two machines.
        cls.runs = {}
        for name, extra in (("one", []), ("two", ["--fpp", "0.001", "--backend", "scalar"])):
            run = subprocess.run([ABF, "bench", "--scenario", "l2", "--threads", "1",
                                  "--repetitions", "1", "--json", *extra],
                                 capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stderr
            path = os.path.join(cls.dir, f"bench-{name}.json")
            with open(path, "w") as handle:
                handle.write(run.stdout)
            cls.runs[name] = path

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_one_machine_draws_throughput_ceiling_and_fpr(self):
        out = os.path.join(self.dir, "one-machine")
        run = plots("--out", out, self.runs["one"])
        self.assertEqual(run.returncode, 0, run.stderr)
        names = sorted(os.listdir(out))
        # The label comes from the file name; one machine: no side by side.
        self.assertEqual(names, ["ceiling-one.png", "fpr.png", "throughput-one.png"])
        for name in names:
            check_png(self, os.path.join(out, name))
            self.assertIn(os.path.join(out, name), run.stdout)

    def test_machines_side_by_side_with_labels(self):
        out = os.path.join(self.dir, "two-machines")
        # Machine "B" is drawn at its own p with --fpp; at 0.01 it has no rows
        # for the throughput and ceiling pictures, which is said, not fatal.
        run = plots("-o", out, f"A box={self.runs['one']}", f"B box={self.runs['two']}")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("B box: no rows at p = 0.01", run.stdout)
        for name in ("throughput-a-box.png", "ceiling-a-box.png", "fpr.png", "machines.png"):
            check_png(self, os.path.join(out, name))
        run = plots("-o", out, "--fpp", "0.001", f"B box={self.runs['two']}",
                    f"A box={self.runs['one']}")
        self.assertEqual(run.returncode, 0, run.stderr)
        check_png(self, os.path.join(out, "throughput-b-box.png"))

    def test_targets_side_by_side(self):
        # Every Highway target of this CPU in one run: the simd rows are
        # series per target, and targets.png draws them side by side.
        run = subprocess.run([ABF, "bench", "--scenario", "l2", "--backend", "simd",
                              "--simd-target", "all", "--threads", "1", "--repetitions", "1",
                              "--json"], capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        path = os.path.join(self.dir, "bench-targets.json")
        with open(path, "w") as handle:
            handle.write(run.stdout)
        out = os.path.join(self.dir, "targets")
        run = plots("-o", out, path)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn(os.path.join(out, "targets.png"), run.stdout)
        for name in ("targets.png", "throughput-targets.png", "ceiling-targets.png"):
            check_png(self, os.path.join(out, name))
        # Rows that name no target (older outputs) are one bar, and where
        # that bar gets several rows for one place, plots says so.
        with open(path) as handle:
            document = json.load(handle)
        for row in document["results"]:
            row.pop("target", None)
        unnamed = os.path.join(self.dir, "bench-unnamed.json")
        with open(unnamed, "w") as handle:
            json.dump(document, handle)
        run = plots("-o", os.path.join(self.dir, "unnamed"), path, unnamed)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("the first is drawn", run.stdout)
        check_png(self, os.path.join(self.dir, "unnamed", "targets.png"))
        # One machine with one target has nothing to set side by side.
        out = os.path.join(self.dir, "one-target")
        run = plots("-o", out, self.runs["one"])
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "targets.png")))

    def test_the_committed_data_draws(self):
        files = sorted(glob.glob(os.path.join(SOURCE, "docs", "data", "bench-*.json")))
        self.assertTrue(files, "no docs/data/bench-*.json")
        out = os.path.join(self.dir, "docs-data")
        run = plots("-o", out, *files)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "machines.png")))
        for path in glob.glob(os.path.join(out, "*.png")):
            check_png(self, path)

    def test_help_teaches(self):
        run = plots("--help")
        self.assertEqual(run.returncode, 0)
        for want in ("LABEL=", "--out", "--fpp", "throughput-LABEL.png", "fraction_of_ceiling",
                     "machines.png", "targets.png", "Examples:", "python3-matplotlib"):
            self.assertIn(want, run.stdout)

    def test_bad_inputs_name_the_file(self):
        broken = os.path.join(self.dir, "broken.json")
        with open(broken, "w") as handle:
            handle.write('{"results": [')
        not_bench = os.path.join(self.dir, "not-bench.json")
        with open(not_bench, "w") as handle:
            handle.write('{"cpu": "x"}')
        row_lacking = os.path.join(self.dir, "row.json")
        with open(row_lacking, "w") as handle:
            handle.write('{"results": [{"backend": "simd", "threads": 1}]}')
        missing = os.path.join(self.dir, "missing.json")
        for path, want in ((broken, "not valid JSON (line 1"), (not_bench, 'no "results" list'),
                           (row_lacking, 'results[0] has no "scenario"'),
                           (missing, "cannot read")):
            run = plots("-o", os.path.join(self.dir, "bad"), self.runs["one"], path)
            self.assertEqual(run.returncode, 1, path)
            self.assertTrue(run.stderr.startswith(f"plots: {path}: "), run.stderr)
            self.assertIn(want, run.stderr)
            self.assertEqual(run.stderr.count("\n"), 1, run.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "bad")))

    def test_usage_errors_exit_two(self):
        self.assertEqual(plots().returncode, 2)
        self.assertEqual(plots("--fpp", "2", self.runs["one"]).returncode, 2)
        self.assertEqual(plots("--frobnicate", self.runs["one"]).returncode, 2)


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        print(f"skipped: scripts/plots needs matplotlib ({error}); "
              "Debian: apt-get install python3-matplotlib")
        sys.exit(77)
    unittest.main(verbosity=2)
