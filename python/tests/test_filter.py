"""abf.Filter: builds from every input form, golden vectors, files, keys,
pickling, merges, errors with their codes, zero copy and the GIL."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import threading
import time

import numpy as np
import pytest

import abf
from abf import _abf
from conftest import members, non_members, random_digests, wait_until

GOLDEN_ID = "5f0c6e2a9b7d4e11a3c2d8f0e6b4a197"
GOLDEN_KEY = bytes(range(16))


def golden_rows(path):
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        rows.append(line.split("\t"))
    assert rows, path
    return rows


def fp_indices(field):
    return [int(x) for x in field.split(",")] if field else []


# --- golden vectors ---------------------------------------------------------------


def test_builds_match_golden_vectors(data_dir):
    rows = golden_rows(data_dir / "vectors" / "builds.tsv")
    probes = non_members(100_000)
    for member_count, n, p_hex, m, k, popcount, payload_sha, fps in rows:
        f = abf.build(members(int(member_count)), int(n), float.fromhex(p_hex))
        assert (f.bit_count, f.hash_count) == (int(m), int(k))
        assert f.popcount == int(popcount)
        assert hashlib.sha256(f.payload).hexdigest() == payload_sha
        assert np.flatnonzero(f.query(probes)).tolist() == fp_indices(fps), member_count


def test_keyed_builds_match_golden_vectors(data_dir):
    rows = golden_rows(data_dir / "vectors" / "v2" / "builds-v2.tsv")
    probes = non_members(20_000)
    for key_hex, member_count, n, p_hex, m, k, popcount, payload_sha, fps in rows:
        key = abf.Key.from_hex(key_hex)
        f = abf.build(members(int(member_count)), int(n), float.fromhex(p_hex), key=key)
        assert f.keyed and f.hash_protocol_version == 2
        assert f.key_fingerprint == key.fingerprint
        assert (f.bit_count, f.hash_count, f.popcount) == (int(m), int(k), int(popcount))
        assert hashlib.sha256(f.payload).hexdigest() == payload_sha
        assert np.flatnonzero(f.query(probes)).tolist() == fp_indices(fps)


def member_1000_fingerprint(data_dir):
    """member-1000's content fingerprint in tests/data/vectors/fingerprint.tsv."""
    for row in golden_rows(data_dir / "vectors" / "fingerprint.tsv"):
        if row[0] == "set" and row[1] == "member-1000":
            return row[4]
    raise AssertionError("fingerprint.tsv has no member-1000")


def same_as_golden(built: bytes, golden: bytes, fingerprint: str):
    """The golden files predate the content fingerprint: a build writes the
    same bytes but for the fingerprint (104..120), its flag (120..124) and
    so the header checksum (72..80), which loading the build verifies."""
    assert built[:72] == golden[:72] and built[80:104] == golden[80:104]
    assert built[104:120].hex() == fingerprint and built[120:124] == b"\x01\0\0\0"
    assert golden[104:128] == bytes(24) and built[124:] == golden[124:]


def test_snapshot_bytes_equal_the_golden_files(data_dir):
    v2 = data_dir / "vectors" / "v2"
    fingerprint = member_1000_fingerprint(data_dir)
    f = abf.build(members(1000), 1000, 0.01, catalog_version=42, catalog_id=GOLDEN_ID)
    same_as_golden(f.to_bytes(), (v2 / "member-1000-v2.abf").read_bytes(), fingerprint)
    assert abf.from_bytes(f.to_bytes()) == f
    keyed = abf.build(members(1000), 1000, 0.01, catalog_version=42, catalog_id=GOLDEN_ID,
                      key=GOLDEN_KEY)
    same_as_golden(keyed.to_bytes(), (v2 / "member-1000-keyed.abf").read_bytes(), fingerprint)
    # A formatVersion-1 file loads with the same bits (its catalog id unknown).
    old = abf.load(data_dir / "vectors" / "member-1000.abf")
    assert old.catalog_id is None
    assert bytes(old.payload) == bytes(f.payload)


# --- input forms ------------------------------------------------------------------


def test_every_input_form_builds_the_same_filter():
    d = members(500)
    reference = abf.build(d, 1000, 0.01).to_bytes()
    raw = d.tobytes()
    forms = {
        "array": d,
        "flat array": d.reshape(-1),
        "S32 array": d.view("S32").ravel(),
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "list of bytes": [bytes(row) for row in d],
        "generator": (bytes(row) for row in d),
        "hex str": [bytes(row).hex() for row in d],
        "oci str": ["sha256:" + bytes(row).hex() for row in d],
        "strided array": np.repeat(d, 2, axis=0)[::2],
    }
    for name, digests in forms.items():
        assert abf.build(digests, 1000, 0.01).to_bytes() == reference, name
    f = abf.from_bytes(reference)
    for name, digests in forms.items():
        if name == "generator":
            digests = (bytes(row) for row in d)
        assert f.query(digests).all(), name


def test_arrays_and_buffers_are_used_in_place():
    d = random_digests(1000, seed=1)
    assert _abf._digest_address(d) == d.ctypes.data
    assert _abf._digest_address(d.reshape(-1)) == d.ctypes.data
    raw = d.tobytes()
    assert _abf._digest_address(raw) == np.frombuffer(raw, np.uint8).ctypes.data
    mv = memoryview(bytearray(raw))
    assert _abf._digest_address(mv) == np.frombuffer(mv, np.uint8).ctypes.data
    # A view with strides is copied once (contiguity), never read in place.
    strided = np.repeat(d, 2, axis=0)[::2]
    assert _abf._digest_address(strided) != strided.ctypes.data
    # And a query's memory does not grow with copies of its input: the
    # answers array is the only allocation of N bytes.
    f = abf.build(d, 1000, 0.01)
    out = np.empty(len(d), bool)
    assert f.query(d, out=out) is out


def test_query_answers_equal_the_scalar_reference_and_might_contain():
    d = members(20_000)
    f = abf.build(d, 20_000, 0.01)
    probes = random_digests(50_000, seed=2)
    simd = f.query(probes)
    scalar = f.query(probes, backend="scalar")
    assert simd.dtype == bool and simd.shape == (50_000,)
    assert np.array_equal(simd, scalar)
    for i in range(0, 50_000, 997):
        assert f.might_contain(probes[i]) == simd[i]
    assert f.query(d).all()
    assert f.query(np.empty((0, 32), np.uint8)).shape == (0,)


def test_query_equals_the_abf_command(tmp_path, abf_cli):
    f = abf.build(members(5000), 5000, 0.01, catalog_version=7)
    path = tmp_path / "f.abf"
    f.save(path)
    probes = np.concatenate([members(1000), random_digests(20_000, seed=3)])
    (tmp_path / "probes.bin").write_bytes(probes.tobytes())
    out = subprocess.run([abf_cli, "query", "--snapshot", str(path), "--input",
                          str(tmp_path / "probes.bin"), "--input-format", "bin"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    lines = out.splitlines()
    assert len(lines) == len(probes)
    cli = np.array([line.split("\t")[1] == "maybe" for line in lines])
    assert [line.split("\t")[0] for line in lines[:3]] == [bytes(r).hex() for r in probes[:3]]
    assert np.array_equal(abf.load(path).query(probes), cli)


# --- files, info, pickling --------------------------------------------------------


def test_save_load_round_trip_and_info(tmp_path):
    d = members(3000)
    f = abf.build(d, 4000, 0.001, catalog_version=9, catalog_id=GOLDEN_ID)
    f.save(tmp_path / "c.abf")
    g = abf.load(tmp_path / "c.abf")
    assert isinstance(g, abf.Filter) and g == f
    assert g.to_bytes() == (tmp_path / "c.abf").read_bytes() == f.to_bytes()
    assert abf.load(str(tmp_path / "c.abf"), mode="map") == f
    info = g.info
    assert info["format_version"] == 2 and info["hash_protocol_version"] == 1
    assert info["expected_item_count"] == 4000 and info["inserted_item_count"] == 3000
    assert info["target_fpp"] == 0.001 and info["catalog_version"] == 9
    assert info["catalog_id"] == GOLDEN_ID and info["key_fingerprint"] is None
    assert info["bit_count"] == g.bit_count and info["payload_length"] == g.bit_count // 8
    assert (info["bit_count"], info["hash_count"]) == abf.choose_layout(4000, 0.001)
    assert g.fill_ratio == g.popcount / g.bit_count
    assert 0 < g.estimated_false_positive_rate < 0.001
    assert "m=" in repr(g) and GOLDEN_ID in repr(g)


def test_pickles_as_snapshot_bytes():
    f = abf.build(members(2000), 2000, 0.01, catalog_version=3)
    for protocol in (2, 4, 5):
        g = pickle.loads(pickle.dumps(f, protocol=protocol))
        assert g == f and g.to_bytes() == f.to_bytes()
    buffers = []
    data = pickle.dumps(f, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == len(f.to_bytes())
    assert len(data) < 1000  # the bitset went out of band
    assert pickle.loads(data, buffers=buffers) == f


def test_keyed_filters_need_their_key(tmp_path):
    key = abf.Key.generate()
    f = abf.build(members(1000), 1000, 0.01, key=key)
    f.save(tmp_path / "k.abf")
    with pytest.raises(abf.FilterKeyError) as e:
        abf.load(tmp_path / "k.abf")
    assert e.value.code == "key_required"
    with pytest.raises(abf.FilterKeyError) as e:
        abf.load(tmp_path / "k.abf", key=abf.Key.generate())
    assert e.value.code == "key_mismatch"
    g = abf.load(tmp_path / "k.abf", key=key)
    assert g == f and g.query(members(1000)).all()
    # The key travels with a pickled keyed filter (workers need it to probe).
    assert pickle.loads(pickle.dumps(f)).query(members(1000)).all()
    unkeyed = abf.build(members(10), 10, 0.01)
    unkeyed.save(tmp_path / "u.abf")
    with pytest.raises(abf.FilterKeyError) as e:
        abf.load(tmp_path / "u.abf", key=key)
    assert e.value.code == "key_mismatch"


def test_keys_are_never_printed(tmp_path):
    raw = bytes(range(100, 116))
    key = abf.Key(raw)
    for text in (repr(key), str(key)):
        assert raw.hex() not in text and key.fingerprint in text
    f = abf.build(members(10), 10, 0.01, key=raw)
    assert raw.hex() not in repr(f) and key.fingerprint in repr(f)
    assert raw.hex() not in str(f.info)
    assert key == abf.Key.from_hex(raw.hex()) and key != abf.Key.generate()
    path = tmp_path / "key"
    abf.write_key_file(key, path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert abf.read_key_file(path) == key
    with pytest.raises(abf.IoError):
        abf.write_key_file(key, path)  # never replaced
    os.chmod(path, 0o644)
    with pytest.raises(abf.FilterKeyError) as e:
        abf.read_key_file(path)
    assert e.value.code == "invalid_key"
    with pytest.raises(abf.FilterKeyError) as e:
        abf.build(members(10), 10, 0.01, key=b"short")
    assert e.value.code == "invalid_key"
    with pytest.raises(TypeError, match="read_key_file"):
        abf.build(members(10), 10, 0.01, key=str(path))


# --- merge ------------------------------------------------------------------------


def test_merge_of_parts_equals_the_whole_build(tmp_path):
    d = random_digests(30_000, seed=4)
    whole = abf.build(d, 30_000, 0.01, catalog_version=5)
    parts = [abf.build(part, 30_000, 0.01, catalog_version=5) for part in np.array_split(d, 3)]
    merged = abf.merge(parts)
    assert merged == whole and merged.to_bytes() == whole.to_bytes()
    paths = []
    for i, part in enumerate(parts):
        paths.append(tmp_path / f"p{i}.abf")
        part.save(paths[-1])
    assert abf.merge(paths) == whole
    other = abf.build(d[:10], 30_000, 0.01, catalog_version=6)
    with pytest.raises(abf.IncompatibleError) as e:
        abf.merge([parts[0], other])
    assert e.value.code == "incompatible_filters" and "catalog" in e.value.message
    assert abf.merge([parts[0], other], catalog_version=6).catalog_version == 6
    too_many = [abf.build(d[:20_000], 30_000, 0.01, catalog_version=5)] * 2
    with pytest.raises(abf.CapacityError):
        abf.merge(too_many)


# --- errors -----------------------------------------------------------------------


def test_errors_carry_the_library_code_and_message(tmp_path):
    d = members(100)
    cases = [
        (lambda: abf.build(d, 0, 0.01), abf.LayoutError, "invalid_expected_item_count"),
        (lambda: abf.build(d, 100, 1.5), abf.LayoutError, "invalid_false_positive_rate"),
        (lambda: abf.build(d, 100, 0.0), abf.LayoutError, "invalid_false_positive_rate"),
        (lambda: abf.build(d, 1 << 30, 1e-30), abf.LayoutError, "filter_too_large"),
        (lambda: abf.build(d, 99, 0.01), abf.CapacityError, "capacity_exceeded"),
        (lambda: abf.build(d[:, :31], 100, 0.01), abf.DigestError, "invalid_digest"),
        (lambda: abf.build(b"x" * 33, 100, 0.01), abf.DigestError, "invalid_digest"),
        (lambda: abf.build([b"x" * 31], 100, 0.01), abf.DigestError, "invalid_digest"),
        (lambda: abf.build(["zz" * 32], 100, 0.01), abf.DigestError, "invalid_digest"),
        (lambda: abf.load(tmp_path / "missing.abf"), abf.IoError, "io_error"),
        (lambda: abf.build(d, 100, 0.01, backend="gpu"), abf.InvalidArgumentError,
         "invalid_argument"),
        (lambda: abf.build(d, 100, 0.01, catalog_id="12"), abf.InvalidArgumentError,
         "invalid_argument"),
    ]
    for call, cls, code in cases:
        with pytest.raises(cls) as e:
            call()
        assert isinstance(e.value, abf.Error)
        assert e.value.code == code, (code, e.value)
        assert e.value.message and str(e.value) == f"{code}: {e.value.message}"
    assert isinstance(abf.IoError("x", "io_error"), OSError)
    assert isinstance(abf.DigestError("x", "invalid_digest"), ValueError)
    with pytest.raises(TypeError):
        abf.build("not digests", 100, 0.01)
    with pytest.raises(TypeError):
        abf.build([1, 2], 100, 0.01)
    e = pickle.loads(pickle.dumps(abf.CapacityError("m", "capacity_exceeded")))
    assert (type(e), e.code, e.message) == (abf.CapacityError, "capacity_exceeded", "m")


def test_a_damaged_snapshot_is_refused_with_its_rule(tmp_path):
    good = abf.build(members(1000), 1000, 0.01).to_bytes()
    damaged = {
        "snapshot_bad_magic": b"XBF1" + good[4:],
        "snapshot_truncated": good[:100],
        "snapshot_header_checksum": good[:20] + b"\x01" + good[21:],
        "snapshot_payload_checksum": good[:200] + bytes([good[200] ^ 1]) + good[201:],
        "snapshot_payload_truncated": good[:-1],
        "snapshot_trailing_bytes": good + b"\0",
    }
    for code, data in damaged.items():
        path = tmp_path / f"{code}.abf"
        path.write_bytes(data)
        for load in (lambda: abf.load(path), lambda: abf.from_bytes(data)):
            with pytest.raises(abf.SnapshotError) as e:
                load()
            assert e.value.code == code


def test_every_library_code_has_a_class():
    codes = _abf._error_codes()
    assert "key_mismatch" in codes and "set_shard_mismatch" in codes
    for number, code in enumerate(codes):
        with pytest.raises(abf.Error) as e:
            _abf._raise(number, "message")
        assert e.value.code == code and e.value.message == "message"
        assert type(e.value) is abf._errors.error_class(code)
        assert type(e.value) is not abf.Error, code  # every code has its family
    assert abf._errors.error_class("snapshot_bad_magic") is abf.SnapshotError
    assert abf._errors.error_class("set_manifest_checksum") is abf.SnapshotError


# --- the GIL ----------------------------------------------------------------------


def test_builds_and_queries_release_the_gil():
    d = random_digests(1 << 21, seed=5)
    f = abf.build(d[:1000], 1 << 22, 0.001)

    def ticks_during(call):
        window = {}
        ticks = []

        def run():
            window["start"] = time.perf_counter()
            call()
            window["end"] = time.perf_counter()

        thread = threading.Thread(target=run)
        thread.start()
        while thread.is_alive():
            ticks.append(time.perf_counter())
        thread.join()
        inside = [t for t in ticks if window["start"] < t < window["end"]]
        return len(inside), window["end"] - window["start"]

    for call in (lambda: f.query(d), lambda: abf.build(d, 1 << 22, 0.001)):
        best = [0, 0.0]

        def ticked():
            inside, seconds = ticks_during(call)
            best[:] = max(best, [inside, seconds])
            return inside > 1000

        # Held GIL: the main thread could not tick at all while the call ran
        # (at most a few ticks at its edges), however often it is tried. A
        # loaded machine may deschedule the ticking thread for one call:
        # called again until it ticked, within a deadline.
        wait_until(ticked, timeout=60, interval=0, what=lambda: (
            "the main thread to tick while the call ran (best: %d ticks in %.3f s)" % tuple(best)))


def test_hex_text_given_as_bytes_is_refused_not_read_as_two_digests():
    """`f.query(line.encode())` and a file read in 'rb' mode hand 64 ASCII hex
    digits where 32 raw bytes are meant: once read as two unrelated digests,
    both answered absent. Every buffer form is refused with DigestError."""
    d = members(1_000)
    f = abf.build(d, 1_000, 0.01)
    text = d[0].tobytes().hex()
    for given in (text.encode(), text.upper().encode(), ("sha256:" + text + "x" * 25).encode(),
                  bytearray(text.encode()), memoryview(text.encode()),
                  np.frombuffer(text.encode(), np.uint8).reshape(2, 32)):
        with pytest.raises(abf.DigestError, match="hex text"):
            f.query(given)
    # The forms that mean the digest still answer it present; might_contain
    # takes one digest as a hex str too.
    assert f.might_contain(text) and f.might_contain("sha256:" + text)
    assert f.might_contain(bytes.fromhex(text))
    assert f.query([text, bytes.fromhex(text)]).all()
    # Raw digests never trip the check (a random digest is all hex digits
    # with probability below 1e-34).
    assert f.query(d).all() and f.query(d.tobytes()).all()


def test_the_sha256_prefix_is_read_in_any_case_as_the_cli_reads_it(tmp_path):
    """Issue 33: "SHA256:<hex>" (what some registries and spreadsheets print)
    was refused with DigestError where `abf query` and `abf serve` take the
    prefix in any case. Every digest input reads it now; a prefix of another
    algorithm, a malformed one, and hex bytes with the prefix in any case are
    still refused."""
    d = members(200)
    f = abf.build(d, 1_000, 0.01)
    reference = f.to_bytes()
    probes = np.concatenate([d[:50], non_members(50)])
    expected = f.query(probes)
    assert expected[:50].all()
    for prefix in ("sha256:", "SHA256:", "Sha256:", "sHA256:"):
        texts = [prefix + bytes(row).hex() for row in probes]
        assert np.array_equal(f.query(texts), expected), prefix
        assert np.array_equal(f.query([t[:7] + t[7:].upper() for t in texts]), expected), prefix
        assert [f.might_contain(t) for t in texts] == list(expected), prefix
        built = abf.build([prefix + bytes(row).hex() for row in d], 1_000, 0.01)
        assert built.to_bytes() == reference, prefix
        with pytest.raises(abf.DigestError, match="hex text"):
            f.query((prefix + bytes(d[0]).hex()[:25]).encode())
    with abf.Catalog.create(tmp_path / "c.db") as catalog:
        catalog.add(["SHA256:" + bytes(row).hex() for row in d])
        assert {bytes(r) for r in catalog.digests()} == {bytes(r) for r in d}
        assert len(catalog.find_missing(["Sha256:" + bytes(row).hex() for row in d])) == 0
    hex0 = bytes(d[0]).hex()
    for bad in ("sha512:" + hex0, "SHA256" + hex0, "SHA256:" + hex0[:63], "SHA256: " + hex0,
                "SHA256:sha256:" + hex0, "SHA25:" + hex0):
        with pytest.raises(abf.DigestError):
            f.query([bad])


def test_the_sha256_prefix_in_any_case_answers_as_the_abf_command(tmp_path, abf_cli):
    d = members(300)
    f = abf.build(d, 1_000, 0.01)
    f.save(tmp_path / "f.abf")
    probes = np.concatenate([d[:100], non_members(200)])
    lines = ["SHA256:" + bytes(row).hex() for row in probes]
    out = subprocess.run([abf_cli, "query", "--snapshot", str(tmp_path / "f.abf")],
                         input="".join(line + "\n" for line in lines),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    cli_answers = [line.split("\t")[1] == "maybe" for line in out.splitlines()]
    assert len(cli_answers) == len(lines)
    assert list(f.query(lines)) == cli_answers
