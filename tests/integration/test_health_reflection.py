"""grpc.health.v1 (Check, Watch through SIGTERM) and server reflection v1 and
v1alpha, including a client that knows no .proto file (what grpcurl does)."""
import os
import queue
import signal
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, json_format  # noqa: E402
from google.protobuf import message_factory  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

SERVICES = ["cacheroute.v1.CacheRoute", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]
CR_FILE = "cacheroute/v1/cacheroute.proto"
CR_METHODS = {
    "Plan": ("PlanRequest", "PlanResponse"),
    "RecordArrival": ("RecordArrivalRequest", "RecordArrivalResponse"),
    "SelectInjection": ("SelectInjectionRequest", "SelectInjectionResponse"),
    "GetRates": ("GetRatesRequest", "GetRatesResponse"),
    "Forget": ("ForgetRequest", "ForgetResponse"),
    "GetNodeProfile": ("GetNodeProfileRequest", "NodeProfile"),
    "ReportOutcome": ("ReportOutcomeRequest", "ReportOutcomeResponse"),
    "GetDecision": ("GetDecisionRequest", "DecisionReceipt"),
    "WatchDecisions": ("WatchDecisionsRequest", "DecisionReceipt"),
    "GetStats": ("GetStatsRequest", "GetStatsResponse"),
    "ClearReservations": ("ClearReservationsRequest", "ClearReservationsResponse"),
    "RecordArrivals": ("RecordArrivalRequest", "RecordArrivalResponse"),
    "Route": ("RouteRequest", "RouteResponse"),
    "Routes": ("RouteRequest", "RouteResponse"),
    "ReportKvEvents": ("ReportKvEventsRequest", "ReportKvEventsResponse"),
    "SetEndpoints": ("SetEndpointsRequest", "EndpointsResponse"),
    "DrainEndpoint": ("DrainEndpointRequest", "EndpointsResponse"),
    "ListEndpoints": ("ListEndpointsRequest", "EndpointsResponse"),
    "WatchEndpoints": ("WatchEndpointsRequest", "EndpointChange"),
}
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]


class HealthTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--replan-interval", "0")

    def test_check(self):
        hs = self.sidecar.health_stub()
        for service in ("", "cacheroute.v1.CacheRoute",
                        "envoy.service.ext_proc.v3.ExternalProcessor", "liveness", "readiness"):
            r = hs.Check(P.health.HealthCheckRequest(service=service), timeout=h.RPC_TIMEOUT)
            self.assertEqual(r.status, P.health.HealthCheckResponse.SERVING, service)
        for service in ("nope", "cacheroute.v1.CacheRoutes", "cacheroute.v1"):
            e = self.assertRpcError(grpc.StatusCode.NOT_FOUND, hs.Check,
                                    P.health.HealthCheckRequest(service=service))
            self.assertIn(service, e.details())

    def test_watch_unknown_service_and_cancel(self):
        hs = self.sidecar.health_stub()
        # Unknown service: Watch answers SERVICE_UNKNOWN (it does not end the
        # stream, as the health protocol says).
        call = hs.Watch(P.health.HealthCheckRequest(service="nope"), timeout=h.RPC_TIMEOUT)
        self.assertEqual(next(call).status, P.health.HealthCheckResponse.SERVICE_UNKNOWN)
        call.cancel()
        # Watchers that go away before shutdown are cleaned up (checked by the
        # exit code, under ASan too).
        calls = [hs.Watch(P.health.HealthCheckRequest(service=""), timeout=h.RPC_TIMEOUT)
                 for _ in range(5)]
        for c in calls:
            self.assertEqual(next(c).status, P.health.HealthCheckResponse.SERVING)
        for c in calls:
            c.cancel()
        r = hs.Check(P.health.HealthCheckRequest(service=""), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.status, P.health.HealthCheckResponse.SERVING)


class WatchShutdownTest(h.SidecarTestCase):
    SHARED = False

    def test_watch_sees_not_serving_then_ends(self):
        sc = self.start_sidecar("--replan-interval", "0")
        hs = sc.health_stub()
        services = ["", "cacheroute.v1.CacheRoute", "", "cacheroute.v1.CacheRoute"]
        streams = []
        for s in services:
            call = hs.Watch(P.health.HealthCheckRequest(service=s), timeout=60)
            q = queue.Queue()

            def pump(call=call, q=q):
                try:
                    for m in call:
                        q.put(("msg", m.status))
                    q.put(("end", grpc.StatusCode.OK))
                except grpc.RpcError as e:
                    q.put(("end", e.code()))

            t = threading.Thread(target=pump, daemon=True)
            t.start()
            streams.append((s, q, t))
        SERVING = P.health.HealthCheckResponse.SERVING
        NOT_SERVING = P.health.HealthCheckResponse.NOT_SERVING
        for s, q, _ in streams:
            self.assertEqual(q.get(timeout=h.RPC_TIMEOUT), ("msg", SERVING), s)
        sc.send(signal.SIGTERM)
        for s, q, t in streams:
            self.assertEqual(q.get(timeout=h.RPC_TIMEOUT), ("msg", NOT_SERVING), s)
            kind, code = q.get(timeout=h.RPC_TIMEOUT)
            self.assertEqual(kind, "end", "the stream must end after NOT_SERVING")
            t.join(h.RPC_TIMEOUT)
        sc.assert_clean_exit(self)
        self.assertEqual(sc.find_events(lambda e: e.get("msg") == "shutting down")[0]["signal"],
                         "SIGTERM")


def reflection_api(version):
    if version == "v1":
        return P.refl, P.refl_grpc.ServerReflectionStub
    return P.refl_alpha, P.refl_alpha_grpc.ServerReflectionStub


class ReflectionTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--replan-interval", "0", "--route-by", "plan")

    def ask(self, version, *requests):
        """Sends the requests on one stream; returns the answers in order."""
        pb, stub_cls = reflection_api(version)
        stub = stub_cls(self.sidecar.channel())
        reqs = [pb.ServerReflectionRequest(host="localhost", **r) for r in requests]
        answers = list(stub.ServerReflectionInfo(iter(reqs), timeout=h.RPC_TIMEOUT))
        self.assertEqual(len(answers), len(reqs))
        for q, a in zip(reqs, answers):
            self.assertEqual(a.original_request, q)
        return answers

    def files(self, answer):
        self.assertEqual(answer.WhichOneof("message_response"), "file_descriptor_response",
                         answer)
        out = []
        for blob in answer.file_descriptor_response.file_descriptor_proto:
            out.append(descriptor_pb2.FileDescriptorProto.FromString(blob))
        return out

    def test_list_services(self):
        for version in ("v1", "v1alpha"):
            with self.subTest(version=version):
                (a,) = self.ask(version, dict(list_services=""))
                self.assertEqual(sorted(s.name for s in a.list_services_response.service),
                                 sorted(SERVICES))

    def test_file_by_filename(self):
        for version in ("v1", "v1alpha"):
            with self.subTest(version=version):
                a, b = self.ask(version, dict(file_by_filename=CR_FILE),
                                dict(file_by_filename="grpc/health/v1/health.proto"))
                (f,) = self.files(a)
                self.assertEqual((f.name, f.package), (CR_FILE, "cacheroute.v1"))
                (svc,) = f.service
                self.assertEqual(svc.name, "CacheRoute")
                self.assertEqual({m.name: (m.input_type, m.output_type) for m in svc.method},
                                 {k: (".cacheroute.v1." + i, ".cacheroute.v1." + o)
                                  for k, (i, o) in CR_METHODS.items()})
                (g,) = self.files(b)
                self.assertEqual(g.package, "grpc.health.v1")
                self.assertEqual([s.name for s in g.service], ["Health"])

    def test_file_containing_symbol(self):
        cases = {
            "cacheroute.v1.CacheRoute": CR_FILE,              # service
            "cacheroute.v1.PlanRequest": CR_FILE,             # message
            "cacheroute.v1.CacheRoute.RecordArrival": CR_FILE,  # method
            "cacheroute.v1.InjectionMode": CR_FILE,           # enum
            ".cacheroute.v1.Route": CR_FILE,                  # leading dot
            "grpc.health.v1.HealthCheckResponse.ServingStatus": "grpc/health/v1/health.proto",
            "grpc.health.v1.Health.Watch": "grpc/health/v1/health.proto",
            "grpc.reflection.v1.ServerReflection": "grpc/reflection/v1/reflection.proto",
            "grpc.reflection.v1alpha.ServerReflectionRequest":
                "grpc/reflection/v1alpha/reflection.proto",
        }
        for version in ("v1", "v1alpha"):
            answers = self.ask(version, *[dict(file_containing_symbol=s) for s in cases])
            for (sym, want), a in zip(cases.items(), answers):
                with self.subTest(version=version, symbol=sym):
                    self.assertEqual(self.files(a)[0].name, want)

    def test_not_found(self):
        for version in ("v1", "v1alpha"):
            answers = self.ask(version, dict(file_by_filename="nope.proto"),
                               dict(file_containing_symbol="cacheroute.v1.Nope"),
                               dict(file_containing_symbol="cacheroute.v1.CacheRoute.Nope"),
                               dict(file_by_filename="cacheroute.proto"),
                               dict(list_services=""))
            for a in answers[:4]:
                with self.subTest(version=version, request=a.original_request):
                    self.assertEqual(a.WhichOneof("message_response"), "error_response")
                    self.assertEqual(a.error_response.error_code, NOT_FOUND)
                    self.assertTrue(a.error_response.error_message)
            # The stream goes on after errors.
            self.assertEqual(len(answers[4].list_services_response.service), len(SERVICES))

    def test_without_proto_files_like_grpcurl(self):
        # What `grpcurl -plaintext HOST list`, `grpcurl ... describe
        # cacheroute.v1.CacheRoute` and `grpcurl -d '{"owners":["7"]}' ...
        # cacheroute.v1.CacheRoute/RecordArrival` do, with NO .proto file:
        # everything comes from reflection. (grpcurl itself is not installable
        # here: not in Debian 12, and no Go module access.)
        pb, stub_cls = reflection_api("v1")
        stub = stub_cls(self.sidecar.channel())

        def one(**req):
            (a,) = list(stub.ServerReflectionInfo(iter([pb.ServerReflectionRequest(**req)]),
                                                  timeout=h.RPC_TIMEOUT))
            return a

        # list
        names = [s.name for s in one(list_services="").list_services_response.service]
        self.assertIn("cacheroute.v1.CacheRoute", names)

        # describe: the file containing the service, and its imports by name.
        pool = descriptor_pool.DescriptorPool()
        added = set()

        def add(fdp_bytes):
            fdp = descriptor_pb2.FileDescriptorProto.FromString(fdp_bytes)
            if fdp.name in added:
                return
            for dep in fdp.dependency:
                if dep not in added:
                    a = one(file_by_filename=dep)
                    for blob in a.file_descriptor_response.file_descriptor_proto:
                        add(blob)
            pool.Add(fdp)
            added.add(fdp.name)

        a = one(file_containing_symbol="cacheroute.v1.CacheRoute")
        for blob in a.file_descriptor_response.file_descriptor_proto:
            add(blob)
        svc = pool.FindServiceByName("cacheroute.v1.CacheRoute")
        self.assertEqual({m.name: (m.input_type.full_name, m.output_type.full_name)
                          for m in svc.methods},
                         {k: ("cacheroute.v1." + i, "cacheroute.v1." + o)
                          for k, (i, o) in CR_METHODS.items()})
        route = pool.FindMessageTypeByName("cacheroute.v1.Route")
        self.assertEqual([(f.name, f.number) for f in route.fields],
                         [("owner", 1), ("rate", 2), ("admitted", 3), ("preferred_shard", 4),
                          ("endpoint_id", 5), ("endpoint_address", 6)])

        # invoke: request/response classes built from the pool only.
        method = svc.FindMethodByName("RecordArrival")
        factory = message_factory.MessageFactory(pool)
        req_cls = factory.GetPrototype(method.input_type)
        resp_cls = factory.GetPrototype(method.output_type)
        req = json_format.Parse('{"owners":["7"]}', req_cls())
        call = self.sidecar.channel().unary_unary(
            "/%s/%s" % (svc.full_name, method.name),
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString)
        resp = call(req, timeout=h.RPC_TIMEOUT)
        out = json_format.MessageToDict(resp)
        self.assertEqual(out["recorded"], 1)
        (route,) = out["routes"]
        self.assertEqual(route["owner"], "7")
        self.assertEqual(route.get("preferredShard", 0), h.fallback_shard(7, 8))
        self.assertFalse(route.get("admitted", False))
        self.assertGreater(route["rate"], 0)
        # The same bytes decode with the generated classes.
        self.assertEqual(P.cr.RecordArrivalResponse.FromString(resp.SerializeToString()).routes[0]
                         .owner, 7)

    def test_other_requests(self):
        for version in ("v1", "v1alpha"):
            pb = reflection_api(version)[0]
            answers = self.ask(
                version, dict(all_extension_numbers_of_type="cacheroute.v1.Route"),
                dict(all_extension_numbers_of_type="cacheroute.v1.Nope"),
                dict(file_containing_extension=pb.ExtensionRequest(
                    containing_type="cacheroute.v1.Route", extension_number=100)))
            self.assertEqual(answers[0].all_extension_numbers_response.base_type_name,
                             "cacheroute.v1.Route")
            self.assertEqual(list(answers[0].all_extension_numbers_response.extension_number), [])
            self.assertEqual(answers[1].error_response.error_code, NOT_FOUND)
            self.assertEqual(answers[2].error_response.error_code, NOT_FOUND)
        # A request with nothing set is an error for the stream.
        pb, stub_cls = reflection_api("v1")
        stub = stub_cls(self.sidecar.channel())
        answers = list(stub.ServerReflectionInfo(iter([pb.ServerReflectionRequest()]),
                                                 timeout=h.RPC_TIMEOUT))
        self.assertEqual(answers[0].error_response.error_code,
                         grpc.StatusCode.INVALID_ARGUMENT.value[0])
        # Malformed bytes end the stream with INVALID_ARGUMENT.
        ch = self.sidecar.channel()
        call = ch.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
        with self.assertRaises(grpc.RpcError) as cm:
            list(call(iter([b"\xff\xff\xff"]), timeout=h.RPC_TIMEOUT))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    h.main()
