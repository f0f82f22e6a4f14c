"""Helpers for the `abf serve` tests: catalogs made with the abf binary, real
server processes on 127.0.0.1 with ports the OS picks, and the exact answer
read from SQLite directly (never from the server or the library).

The tests run from CTest (tests/serve_tests.cmake) with ABF_CLI naming the
binary. A Python module they need that is missing ends the test with exit
status 77, which CTest reports as skipped, with the reason on stderr;
scripts/setup installs every one of them, so CI never skips.
"""

import atexit
import hashlib
import http.client
import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

SKIP = 77

# How long a test waits for something asynchronous (a reload, a rebuild, a
# log line, a counter) before it fails. Only a failing test waits that long:
# every wait polls and returns as soon as its event is seen.
WAIT_SECONDS = 60.0
POLL_SECONDS = 0.02


def wait_until(predicate, timeout=WAIT_SECONDS, interval=POLL_SECONDS, what="the condition"):
    """Polls `predicate` every `interval` seconds until it returns a true
    value, and returns that value. When `timeout` seconds pass first, raises
    AssertionError naming `what` (a string, or a function called for the
    message, e.g. to show the last state seen). The predicate is asked once
    more at the deadline, so a check that just came true never fails."""
    deadline = time.monotonic() + timeout
    while True:
        last_chance = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last_chance:
            text = what() if callable(what) else what
            raise AssertionError("waited %.0f s for %s, in vain" % (timeout, text))
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


def require(*modules):
    """Imports `modules` or exits with SKIP naming the Debian package."""
    packages = {"requests": "python3-requests", "grpc": "python3-grpcio",
                "grpc_tools": "python3-grpc-tools", "google.protobuf": "python3-protobuf"}
    for name in modules:
        try:
            __import__(name)
        except ImportError as error:
            sys.stderr.write("SKIP: Python module %s is missing (%s; Debian %s, which "
                             "scripts/setup installs)\n" % (name, error, packages.get(name, name)))
            sys.exit(SKIP)


def abf_binary():
    path = os.environ.get("ABF_CLI")
    if not path or not os.path.exists(path):
        sys.stderr.write("ABF_CLI must name the abf binary (got %r)\n" % path)
        sys.exit(1)
    return path


def digest(label):
    """SHA-256 of `label`, as 32 bytes."""
    return hashlib.sha256(label.encode()).digest()


def digests(prefix, count, start=0):
    return [digest("%s:%d" % (prefix, i)) for i in range(start, start + count)]


def run_abf(*args, check=True, stdin=None):
    result = subprocess.run([abf_binary()] + [str(a) for a in args], input=stdin,
                            capture_output=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError("abf %s failed (%d): %s" % (
            " ".join(str(a) for a in args), result.returncode, result.stderr.decode()))
    return result



def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class Catalog:
    """A SQLite catalog made and changed with `abf catalog`, and snapshots of
    it made with `abf build --from-catalog`."""

    def __init__(self, directory, name="catalog", expected_items=200000, fpp=0.01, key_file=None):
        self.directory = directory
        self.db = os.path.join(directory, name + ".db")
        self.snapshot = os.path.join(directory, name + ".abf")
        self.expected_items = expected_items
        self.fpp = fpp
        self.key_file = key_file
        run_abf("catalog", "init", "--db", self.db)
        self.version = 0

    def _change(self, command, items):
        path = os.path.join(self.directory, "change.txt")
        with open(path, "w") as out:
            out.write("".join(d.hex() + "\n" for d in items))
        result = run_abf("catalog", command, "--db", self.db, "--input", path, "--json")
        self.version = json.loads(result.stdout)["catalog_version"]
        return self.version

    def add(self, items):
        return self._change("add", items)

    def remove(self, items):
        return self._change("remove", items)

    def build(self, output=None, version=None):
        """Builds the snapshot of `version` (default: the latest) at `output`
        (default: the served path), atomically (abf build renames into place)."""
        args = ["build", "--from-catalog", self.db, "--expected-items", self.expected_items,
                "--fpp", self.fpp, "--output", output or self.snapshot]
        if version is not None:
            args += ["--catalog-version", version]
        if self.key_file:
            args += ["--key-file", self.key_file]
        run_abf(*args)
        return output or self.snapshot


class Truth:
    """The exact answer, from the catalog's SQLite file directly: a digest
    exists at version v when one of its rows has added_version <= v and
    removed_version NULL or > v (docs/service.md)."""

    def __init__(self, db):
        connection = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
        self.rows = {}
        for digest_bytes, added, removed in connection.execute(
                "SELECT digest, added_version, removed_version FROM artifacts"):
            self.rows.setdefault(bytes(digest_bytes), []).append((added, removed))
        connection.close()

    def exists(self, digest_bytes, version):
        return any(added <= version and (removed is None or removed > version)
                   for added, removed in self.rows.get(digest_bytes, ()))

    def missing(self, items, version):
        return [d for d in items if not self.exists(d, version)]


def write_private(path, text):
    """Writes `text` to a new file of mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


def temp_dir(owner, prefix):
    """A new temporary directory, removed by `owner`'s cleanups: a TestCase
    (addCleanup, from setUp or a test) or a TestCase class (addClassCleanup,
    from setUpClass). Cleanups run even when setUp or setUpClass fails
    later, which tearDown and tearDownClass do not, and after them, so a
    server stopped there is gone before its files are removed."""
    directory = tempfile.mkdtemp(prefix=prefix)
    if isinstance(owner, type):
        owner.addClassCleanup(shutil.rmtree, directory, True)
    else:
        owner.addCleanup(shutil.rmtree, directory, True)
    return directory


_running = []


@atexit.register
def _kill_running():
    """A server whose test failed before its stop() is killed when the test
    process exits, not left listening."""
    for server in _running:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=10)


class Server:
    """A running `abf serve`: started with `args`, its ready line read from
    stdout (bounded wait), its log kept; stop() sends SIGTERM and waits, and
    keeps the whole log in `last_log`."""

    def __init__(self, *args, expect_failure=False, timeout=30, listen=True, preexec_fn=None):
        self.log_path = tempfile.mktemp(prefix="abf-serve-log-")
        # Removed by stop(); a server whose start failed (or a test that
        # failed before stop) leaves it to the end of the process.
        atexit.register(_remove_quietly, self.log_path)
        self.log = open(self.log_path, "w+b")
        self.process = subprocess.Popen(
            [abf_binary(), "serve"] + (["--listen", "127.0.0.1:0"] if listen else []) +
            [str(a) for a in args],
            stdout=subprocess.PIPE, stderr=self.log, preexec_fn=preexec_fn)
        _running.append(self)
        self.stopped = False
        self.ready = None
        if expect_failure:
            self.returncode = self.process.wait(timeout=timeout)
            return
        line = self._read_line(timeout)
        if not line:
            self.process.kill()
            self.process.wait(timeout=10)
            raise AssertionError("abf serve did not start: " + self.log_text())
        self.ready = json.loads(line)
        self.http = self.ready["http"]
        self.grpc = self.ready.get("grpc") or None
        self.url = "http://" + self.http

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        data = b""
        fd = self.process.stdout.fileno()
        while not data.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        return data.decode().strip()

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as log:
            return log.read().decode(errors="replace")

    def log_lines(self):
        """The JSON lines of the log so far; a last line the server is
        still writing (no newline yet) is left for the next call."""
        text = self.log_text()
        complete = text[:text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.startswith("{")]

    def wait_for_log(self, predicate, count=1, timeout=WAIT_SECONDS, what=None):
        """The log lines (parsed) for which `predicate` holds, once there
        are at least `count` of them (polled; AssertionError after
        `timeout`). An HTTP request's access line, and its counts in
        /metrics (requests, digests, latency), are written after its answer
        was sent: a test that checks them waits for the line first."""
        def matching():
            lines = [line for line in self.log_lines() if predicate(line)]
            return lines if len(lines) >= count else None
        return wait_until(matching, timeout, what=what or (
            lambda: "%d matching log line(s); the log:\n%s" % (count, self.log_text()[-4000:])))

    def signal(self, number):
        self.process.send_signal(number)

    def stop(self, timeout=30):
        """SIGTERM, then the exit status (killed after `timeout` seconds)."""
        if self.stopped:
            return self.process.returncode
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
                raise AssertionError("abf serve did not stop within %d s of SIGTERM" % timeout)
        self.process.stdout.close()
        self.last_log = self.log_text()
        self.log.close()
        returncode = self.process.returncode
        self.stopped = True
        _running.remove(self)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        return returncode


class Connection:
    """One HTTP/1.1 keep-alive connection to a server (http.client), for the
    tests that read an HTTP request's access line or its counts in /metrics.
    The server writes those after the answer was sent, but before it reads
    the connection's next request: once sync()'s GET /healthz is answered,
    every request sent before it on this connection is in the log and the
    counters. A connection the server closed in between is an error (the
    order would not hold on a new one)."""

    def __init__(self, server, headers=None, timeout=30):
        host, port = server.http.rsplit(":", 1)
        self.http = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.headers = dict(headers or {})
        self.sock = None

    def request(self, method, path, body=None, headers=None):
        """(status, headers, body) of one request on this connection."""
        sent = dict(self.headers, **(headers or {}))
        self.http.request(method, path, body=body, headers=sent)
        response = self.http.getresponse()
        data = response.read()
        if self.sock is None:
            self.sock = self.http.sock
        if self.http.sock is None or self.http.sock is not self.sock:
            raise AssertionError("the server closed the connection after %s %s (%d)" % (
                method, path, response.status))
        return response.status, response.headers, data

    def sync(self):
        status, _, body = self.request("GET", "/healthz")
        if status != 200:
            raise AssertionError("GET /healthz: %d %r" % (status, body))

    def close(self):
        self.http.close()


def generate_grpc_modules(directory, proto="remote_execution"):
    """The Python gRPC client of proto/<proto>.proto (remote_execution, or
    health: grpc.health.v1), generated with grpc_tools (python3-grpc-tools,
    Debian's 1.14, whose bundled protoc output runs on python3-grpcio 1.51
    and python3-protobuf 3.21); imports and returns (<proto>_pb2,
    <proto>_pb2_grpc)."""
    import importlib
    from grpc_tools import protoc
    proto_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")
    proto_dir = os.path.normpath(proto_dir)
    status = protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + directory,
                          "--grpc_python_out=" + directory,
                          os.path.join(proto_dir, proto + ".proto")])
    if status != 0:
        raise AssertionError("grpc_tools.protoc failed with %d" % status)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return (importlib.import_module(proto + "_pb2"),
            importlib.import_module(proto + "_pb2_grpc"))


def metric(text, name, **labels):
    """The value of one sample of a Prometheus exposition, or None."""
    want = ",".join('%s="%s"' % item for item in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, label_text = head.partition("{")
        if metric_name != name:
            continue
        got = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
        if got == want:
            return float(value)
    return None
