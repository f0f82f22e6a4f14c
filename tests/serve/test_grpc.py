"""`abf serve` over gRPC: the Remote Execution API's
ContentAddressableStorage.FindMissingBlobs, driven by a Python client
generated from the same proto/remote_execution.proto (grpc_tools), every
answer checked against the catalog's SQLite file."""

import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_support as support  # noqa: E402

support.require("grpc", "grpc_tools", "google.protobuf")
import grpc  # noqa: E402

MEMBERS = support.digests("member", 2000)
LATER = support.digests("later", 300)
NEW = support.digests("new", 2000)


class FindMissingBlobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-grpc-")
        cls.pb2, cls.pb2_grpc = support.generate_grpc_modules(cls.dir)
        cls.a = support.Catalog(cls.dir, "a")
        cls.b = support.Catalog(cls.dir, "b")
        cls.a.add(MEMBERS)
        cls.a.add(LATER)
        cls.a.remove(MEMBERS[:50])
        cls.a.build()
        cls.b.add(NEW[:500])
        cls.b.build()
        cls.tokens = {"a": "grpc-token-tenant-a-0123456", "all": "grpc-token-every-tenant-0123",
                      "ops": "grpc-token-metrics-012345678"}
        tokens = support.write_private(os.path.join(cls.dir, "tokens"),
                                       "%(a)s a\n%(all)s *\n%(ops)s @metrics\n" % cls.tokens)
        config = os.path.join(cls.dir, "serve.json")
        with open(config, "w") as out:
            out.write('{"tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db"},'
                      ' {"name": "b", "snapshot": "b.abf", "db": "b.db"}],'
                      ' "token_file": "tokens", "limits": {"max_digests_per_request": 10000}}')
        cls.server = support.Server("--config", config, "--grpc-listen", "127.0.0.1:0")
        cls.channel = grpc.insecure_channel(cls.server.grpc)
        cls.stub = cls.pb2_grpc.ContentAddressableStorageStub(cls.channel)
        cls.truth = support.Truth(cls.a.db)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def request(self, items, instance="a", function=None, sizes=None):
        request = self.pb2.FindMissingBlobsRequest(instance_name=instance)
        for i, d in enumerate(items):
            request.blob_digests.add(hash=d.hex(), size_bytes=sizes[i] if sizes else 100 + i)
        if function is not None:
            request.digest_function = function
        return request

    def call(self, request, token="a"):
        metadata = [("authorization", "Bearer " + self.tokens[token])] if token else []
        return self.stub.FindMissingBlobs.with_call(request, metadata=metadata, timeout=30)

    def assert_code(self, request, code, token="a"):
        with self.assertRaises(grpc.RpcError) as raised:
            self.call(request, token)
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        return raised.exception.details()

    def test_answers_are_exact_and_in_order_with_sizes_kept(self):
        items = []
        for i in range(300):
            items += [MEMBERS[i * 6], NEW[i], LATER[i], MEMBERS[i % 50]]
        response, call = self.call(self.request(items))
        trailing = dict(call.trailing_metadata())
        version = int(trailing["x-abf-catalog-version"])
        self.assertEqual(version, 3)
        expected = self.truth.missing(items, version)
        self.assertEqual([bytes.fromhex(d.hash) for d in response.missing_blob_digests], expected)
        # Each missing digest comes back as it was sent, size included.
        sent = [(d.hex(), 100 + i) for i, d in enumerate(items) if not self.truth.exists(d, version)]
        self.assertEqual([(d.hash, d.size_bytes) for d in response.missing_blob_digests], sent)

    def test_sha256_is_the_only_digest_function(self):
        items = [NEW[0], MEMBERS[100]]
        for function in (self.pb2.DigestFunction.SHA256, self.pb2.DigestFunction.UNKNOWN):
            response, _ = self.call(self.request(items, function=function))
            self.assertEqual([d.hash for d in response.missing_blob_digests], [NEW[0].hex()])
        for function in (self.pb2.DigestFunction.SHA1, self.pb2.DigestFunction.MD5,
                         self.pb2.DigestFunction.BLAKE3):
            details = self.assert_code(self.request(items, function=function),
                                       grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("unsupported_digest_function", details)

    def raw_call(self, data, token="a"):
        """FindMissingBlobs with `data` as the request's bytes."""
        method = self.channel.unary_unary(
            "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs")
        metadata = [("authorization", "Bearer " + self.tokens[token])]
        return method.with_call(data, metadata=metadata, timeout=30)

    def assert_raw_code(self, data, code):
        with self.assertRaises(grpc.RpcError) as raised:
            self.raw_call(data)
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        return raised.exception.details()

    def test_wire_types_and_digest_function_numbers(self):
        def varint(value):
            out = b""
            while value >= 0x80:
                out += bytes([value & 0x7f | 0x80])
                value >>= 7
            return out + bytes([value])

        digest = self.request([NEW[0]]).blob_digests[0].SerializeToString()
        good = b"\x0a\x01a" + b"\x12" + varint(len(digest)) + digest
        response, _ = self.raw_call(good)
        self.assertEqual(self.pb2.FindMissingBlobsResponse.FromString(response)
                         .missing_blob_digests[0].hash, NEW[0].hex())
        # A digest sent as a varint was skipped and the answer OK without it.
        details = self.assert_raw_code(good + b"\x10\x05", grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("invalid_request", details)
        self.assertIn("field 2 (blob_digests) with wire type 0", details)
        details = self.assert_raw_code(good + b"\x00\x01", grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("field number 0", details)
        # 2^63 was named UNKNOWN (its low 32 bits), a value that is accepted.
        details = self.assert_raw_code(good + b"\x18" + varint(1 << 63),
                                       grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("digest_function 9223372036854775808:", details)
        self.assertNotIn("UNKNOWN", details)
        details = self.assert_raw_code(good + b"\x18" + varint(3),
                                       grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("digest_function MD5:", details)

    def test_bad_digests(self):
        request = self.pb2.FindMissingBlobsRequest(instance_name="a")
        request.blob_digests.add(hash=NEW[0].hex(), size_bytes=1)
        request.blob_digests.add(hash="abc", size_bytes=1)
        details = self.assert_code(request, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("blob_digests[1]", details)
        details = self.assert_code(self.request([NEW[0]], sizes=[-1]),
                                   grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("size_bytes", details)
        self.assert_code(self.request(support.digests("many", 10001)),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_tenants_and_tokens(self):
        items = NEW[:10]
        self.assert_code(self.request(items), grpc.StatusCode.UNAUTHENTICATED, token=None)
        self.tokens["bad"] = "not-a-valid-token-0000000"
        self.assert_code(self.request(items), grpc.StatusCode.UNAUTHENTICATED, token="bad")
        self.assert_code(self.request(items, instance="b"), grpc.StatusCode.PERMISSION_DENIED)
        self.assert_code(self.request(items, instance="nope"), grpc.StatusCode.PERMISSION_DENIED)
        self.assert_code(self.request(items, instance="nope"), grpc.StatusCode.NOT_FOUND,
                         token="all")
        # Two tenants: an empty instance_name names none of them for "*"; a
        # one-tenant token asks its own (test_ops.py: whatever the server's tenants).
        self.assert_code(self.request(items, instance=""), grpc.StatusCode.INVALID_ARGUMENT,
                         token="all")
        response, _ = self.call(self.request(items, instance=""), token="a")
        self.assertEqual(len(response.missing_blob_digests), 10)
        response, _ = self.call(self.request(items, instance="b"), token="all")
        self.assertEqual(len(response.missing_blob_digests), 0)  # NEW[:500] are B's
        response, _ = self.call(self.request(items, instance="a"), token="all")
        self.assertEqual(len(response.missing_blob_digests), 10)

    def test_other_cas_methods_are_unimplemented(self):
        for method in ("BatchReadBlobs", "BatchUpdateBlobs", "GetTree"):
            call = self.channel.unary_unary(
                "/build.bazel.remote.execution.v2.ContentAddressableStorage/" + method)
            with self.assertRaises(grpc.RpcError) as raised:
                call(b"", timeout=10)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # And the server keeps serving.
        response, _ = self.call(self.request([NEW[1]]))
        self.assertEqual(len(response.missing_blob_digests), 1)

    def test_a_request_id_comes_back_in_the_initial_metadata_and_the_access_line(self):
        metadata = [("authorization", "Bearer " + self.tokens["a"])]
        _, call = self.stub.FindMissingBlobs.with_call(
            self.request([NEW[3]]), metadata=metadata + [("x-request-id", "bazel-77:abc")],
            timeout=30)
        self.assertEqual(dict(call.initial_metadata()).get("x-request-id"), "bazel-77:abc")
        made = []
        for sent in ([], [("x-request-id", "not sane!")]):
            _, call = self.stub.FindMissingBlobs.with_call(self.request([NEW[4]]),
                                                           metadata=metadata + sent, timeout=30)
            made.append(dict(call.initial_metadata()).get("x-request-id"))
        for value in made:
            self.assertEqual(len(value), 32, made)
            self.assertLessEqual(set(value), set("0123456789abcdef"), made)
        self.assertNotEqual(made[0], made[1])
        # Refused calls carry one too.
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.FindMissingBlobs(self.request([NEW[5]]), timeout=30,
                                       metadata=[("x-request-id", "refused-1")])
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(dict(raised.exception.initial_metadata()).get("x-request-id"),
                         "refused-1")
        for value in ["bazel-77:abc", "refused-1"] + made:
            self.server.wait_for_log(
                lambda line, value=value: line.get("front") == "grpc" and
                line.get("request_id") == value,
                what="the gRPC access line with request_id " + value)

    def test_grpc_requests_are_counted_and_logged(self):
        self.call(self.request([NEW[2]]))
        import requests
        text = requests.get(self.server.url + "/metrics",
                            headers={"Authorization": "Bearer " + self.tokens["ops"]},
                            timeout=10).text
        self.assertGreaterEqual(support.metric(text, "artifact_bloom_serve_requests_total", front="grpc",
                                               tenant="a", status="200"), 1)
        lines = [line for line in self.server.log_lines() if line.get("front") == "grpc"]
        self.assertTrue(lines)
        self.assertIn("answer_us", [line for line in lines if line["status"] == 200][-1])
        self.assertNotIn(NEW[2].hex(), self.server.log_text())



def varint(value):
    out = b""
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def length_field(number, data):
    """One length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(data):
    """The (field number, value) pairs of a protobuf message: ints for
    varints, bytes for length-delimited fields (all this test needs)."""
    out, at = [], 0
    while at < len(data):
        key, at = read_varint(data, at)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, at = read_varint(data, at)
        elif kind == 2:
            length, at = read_varint(data, at)
            value, at = data[at:at + length], at + length
        else:
            raise AssertionError("wire type %d in a reflection answer" % kind)
        out.append((number, value))
    return out


def read_varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


class StandardServices(unittest.TestCase):
    """grpc.health.v1 (its statuses follow /readyz), server reflection
    (grpc.reflection.v1alpha, so grpcurl needs no .proto) and REAPI's
    Capabilities.GetCapabilities for SHA-256."""

    CAS = "build.bazel.remote.execution.v2.ContentAddressableStorage"
    CAPABILITIES = "build.bazel.remote.execution.v2.Capabilities"

    @classmethod
    def setUpClass(cls):
        cls.dir = support.temp_dir(cls, "abf-serve-grpc-std-")
        cls.pb2, cls.pb2_grpc = support.generate_grpc_modules(cls.dir)
        cls.health_pb2, cls.health_grpc = support.generate_grpc_modules(cls.dir, "health")
        cls.catalog = support.Catalog(cls.dir, "a")
        cls.catalog.add(MEMBERS[:200])
        cls.catalog.build()
        cls.tokens = {"a": "grpc-std-token-tenant-a-0123", "all": "grpc-std-token-every-01234"}
        tokens = support.write_private(os.path.join(cls.dir, "tokens"),
                                       "%(a)s a\n%(all)s *\n" % cls.tokens)
        other = support.Catalog(cls.dir, "b")
        other.add(NEW[:10])
        other.build()
        config = os.path.join(cls.dir, "serve.json")
        with open(config, "w") as out:
            out.write('{"tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db"},'
                      ' {"name": "b", "snapshot": "b.abf", "db": "b.db"}],'
                      ' "token_file": "tokens"}')
        cls.server = support.Server("--config", config, "--grpc-listen", "127.0.0.1:0")
        cls.channel = grpc.insecure_channel(cls.server.grpc)
        cls.health = cls.health_grpc.HealthStub(cls.channel)
        cls.capabilities = cls.pb2_grpc.CapabilitiesStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        status = cls.server.stop()
        assert status == 0, "abf serve exited %d" % status

    def check(self, service):
        request = self.health_pb2.HealthCheckRequest(service=service)
        return self.health.Check(request, timeout=30).status

    def reflect(self, request):
        """One ServerReflectionInfo exchange, bytes in and out (no client
        library for reflection in Debian's python3-grpcio)."""
        call = self.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda data: data, response_deserializer=lambda data: data)
        answers = list(call(iter([request]), timeout=30))
        self.assertEqual(len(answers), 1)
        return dict(fields(answers[0]))

    def test_health_says_serving_for_the_server_and_its_services(self):
        serving = self.health_pb2.HealthCheckResponse.SERVING
        support.wait_until(lambda: self.check("") == serving, what="health SERVING")
        for service in (self.CAS, self.CAPABILITIES):
            self.assertEqual(self.check(service), serving, service)
        with self.assertRaises(grpc.RpcError) as raised:
            self.check("no.such.Service")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_and_describes_every_service(self):
        # list_services (field 7) -> list_services_response (field 6).
        answer = self.reflect(length_field(7, b"*"))
        listed = [dict(fields(entry))[1].decode() for number, entry in
                  fields(answer[6]) if number == 1]
        for name in (self.CAS, self.CAPABILITIES, "grpc.health.v1.Health",
                     "grpc.reflection.v1alpha.ServerReflection"):
            self.assertIn(name, listed)
        from google.protobuf import descriptor_pb2
        # file_containing_symbol (field 4) -> file_descriptor_response (4).
        for symbol, service, method in ((self.CAPABILITIES, "Capabilities", "GetCapabilities"),
                                        (self.CAS, "ContentAddressableStorage",
                                         "FindMissingBlobs"),
                                        ("grpc.health.v1.Health", "Health", "Check")):
            answer = self.reflect(length_field(4, symbol.encode()))
            self.assertIn(4, answer, "no file descriptor for " + symbol)
            files = [descriptor_pb2.FileDescriptorProto.FromString(data)
                     for number, data in fields(answer[4]) if number == 1]
            methods = {(s.name, m.name) for f in files for s in f.service for m in s.method}
            self.assertIn((service, method), methods, symbol)

    def test_capabilities_answer_for_sha256_and_no_execution(self):
        metadata = [("authorization", "Bearer " + self.tokens["a"])]
        for instance in ("a", ""):  # "" is the token's one tenant
            answer = self.capabilities.GetCapabilities(
                self.pb2.GetCapabilitiesRequest(instance_name=instance), metadata=metadata,
                timeout=30)
            cache = answer.cache_capabilities
            self.assertEqual(list(cache.digest_functions), [self.pb2.DigestFunction.SHA256])
            self.assertFalse(cache.action_cache_update_capabilities.update_enabled)
            self.assertFalse(answer.execution_capabilities.exec_enabled)
            self.assertEqual(list(answer.execution_capabilities.digest_functions),
                             [self.pb2.DigestFunction.SHA256])
            self.assertEqual((answer.low_api_version.major, answer.low_api_version.minor), (2, 0))
            self.assertEqual((answer.high_api_version.major, answer.high_api_version.minor),
                             (2, 3))
        # The same tokens and tenants as FindMissingBlobs.
        for token, instance, code in ((None, "a", grpc.StatusCode.UNAUTHENTICATED),
                                      ("a", "b", grpc.StatusCode.PERMISSION_DENIED),
                                      ("all", "nope", grpc.StatusCode.NOT_FOUND),
                                      ("all", "", grpc.StatusCode.INVALID_ARGUMENT)):
            sent = [("authorization", "Bearer " + self.tokens[token])] if token else []
            with self.assertRaises(grpc.RpcError) as raised:
                self.capabilities.GetCapabilities(
                    self.pb2.GetCapabilitiesRequest(instance_name=instance), metadata=sent,
                    timeout=30)
            self.assertEqual(raised.exception.code(), code, (token, instance))
        self.server.wait_for_log(lambda line: line.get("method") == "GetCapabilities" and
                                 line.get("status") == 200 and line.get("tenant") == "a",
                                 what="a GetCapabilities access line")



class HealthFollowsReadiness(unittest.TestCase):
    def test_health_says_not_serving_when_the_server_is_not_ready(self):
        directory = support.temp_dir(self, "abf-serve-grpc-health-")
        health_pb2, health_grpc = support.generate_grpc_modules(directory, "health")
        catalog = support.Catalog(directory)
        catalog.add(MEMBERS[:100])
        catalog.build()
        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--grpc-listen", "127.0.0.1:0")
        channel = grpc.insecure_channel(server.grpc)
        try:
            stub = health_grpc.HealthStub(channel)
            status = health_pb2.HealthCheckResponse

            def check(service=""):
                return stub.Check(health_pb2.HealthCheckRequest(service=service),
                                  timeout=30).status

            support.wait_until(lambda: check() == status.SERVING, what="health SERVING")
            # The catalog file replaced by rename makes the tenant unready
            # (/readyz 503): health says NOT_SERVING within about a second.
            replacement = os.path.join(directory, "replacement.db")
            shutil.copy(catalog.db, replacement)
            os.rename(replacement, catalog.db)
            support.wait_until(
                lambda: requests_status(server.url + "/readyz") == 503, what="/readyz 503")
            support.wait_until(lambda: check() == status.NOT_SERVING,
                               what="health NOT_SERVING after the catalog was replaced")
            self.assertEqual(check(StandardServices.CAS), status.NOT_SERVING)
        finally:
            channel.close()
            self.assertEqual(server.stop(), 0)


def requests_status(url):
    import requests
    return requests.get(url, timeout=30).status_code

class Tls(unittest.TestCase):
    def test_grpc_over_tls(self):
        directory = support.temp_dir(self, "abf-serve-grpc-tls-")
        pb2, pb2_grpc = support.generate_grpc_modules(directory)
        catalog = support.Catalog(directory)
        catalog.add(MEMBERS[:100])
        catalog.build()
        cert = os.path.join(directory, "cert.pem")
        key = os.path.join(directory, "key.pem")
        result = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", cert, "-days", "2", "-subj", "/CN=localhost", "-addext",
             "subjectAltName=DNS:localhost,IP:127.0.0.1"], capture_output=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        server = support.Server("--snapshot", catalog.snapshot, "--db", catalog.db,
                                "--grpc-listen", "127.0.0.1:0", "--tls-cert", cert,
                                "--tls-key", key)
        try:
            with open(cert, "rb") as pem:
                credentials = grpc.ssl_channel_credentials(root_certificates=pem.read())
            port = server.grpc.rsplit(":", 1)[1]
            with grpc.secure_channel("localhost:" + port, credentials) as channel:
                stub = pb2_grpc.ContentAddressableStorageStub(channel)
                request = pb2.FindMissingBlobsRequest()
                request.blob_digests.add(hash=MEMBERS[0].hex(), size_bytes=1)
                request.blob_digests.add(hash=NEW[0].hex(), size_bytes=2)
                response = stub.FindMissingBlobs(request, timeout=30)
                self.assertEqual([d.hash for d in response.missing_blob_digests],
                                 [NEW[0].hex()])
            # A plaintext client gets no answer from the TLS port.
            with grpc.insecure_channel(server.grpc) as channel:
                stub = pb2_grpc.ContentAddressableStorageStub(channel)
                with self.assertRaises(grpc.RpcError) as raised:
                    stub.FindMissingBlobs(pb2.FindMissingBlobsRequest(), timeout=30)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        finally:
            self.assertEqual(server.stop(), 0)

if __name__ == "__main__":
    unittest.main(verbosity=2)
