"""TLS, mTLS, certificate checks and rotation, --health-listen, authorization.

Every certificate is made here with the openssl CLI in a temp dir: a CA, a
server certificate for 127.0.0.1, client certificates with SAN URI, SAN DNS
or only a CN, and a second CA for the refusals."""
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

ADMIN_URI = "spiffe://cacheroute.test/admin"
ADMIN_DNS = "admin.cacheroute.test"
ADMIN_CN = "cn-admin"
OTHER_URI = "spiffe://cacheroute.test/other"
TOKEN = "s3cret-token_0123456789"
NO_SECURITY = "no transport security and no authorization: every call is open"


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Pki:
    """Certificates under one temp dir; each path returned is a file."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cr-tls-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def ca(self, name):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", self.path(name + ".key"), "-out", self.path(name + ".pem"),
                "-days", "30", "-subj", "/CN=" + name)
        return self.path(name + ".pem")

    def leaf(self, name, ca, cn, san=None, days="30"):
        """A key and a certificate signed by ca (a name given to ca())."""
        cmd = ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
               "-nodes", "-keyout", self.path(name + ".key"), "-out", self.path(name + ".csr"),
               "-subj", "/CN=" + cn]
        if san:
            cmd += ["-addext", "subjectAltName=" + san]
        openssl(*cmd)
        openssl("x509", "-req", "-in", self.path(name + ".csr"), "-CA", self.path(ca + ".pem"),
                "-CAkey", self.path(ca + ".key"), "-CAcreateserial", "-days", days,
                "-copy_extensions", "copy", "-out", self.path(name + ".pem"))
        return self.path(name + ".pem"), self.path(name + ".key")

    def future(self, name, ca):
        """A certificate valid from 2030 (openssl ca sets the start date)."""
        db = self.path(name + "-db")
        os.makedirs(db)
        open(os.path.join(db, "index.txt"), "w").close()
        with open(os.path.join(db, "serial"), "w") as f:
            f.write("01\n")
        cnf = self.path(name + ".cnf")
        with open(cnf, "w") as f:
            f.write("[ca]\ndefault_ca = t\n[t]\ndatabase = %s/index.txt\nnew_certs_dir = %s\n"
                    "serial = %s/serial\ndefault_md = sha256\npolicy = any\n"
                    "copy_extensions = copy\n[any]\ncommonName = supplied\n" % (db, db, db))
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", self.path(name + ".key"), "-out", self.path(name + ".csr"),
                "-subj", "/CN=" + name)
        openssl("ca", "-batch", "-config", cnf, "-cert", self.path(ca + ".pem"), "-keyfile",
                self.path(ca + ".key"), "-in", self.path(name + ".csr"), "-out",
                self.path(name + ".pem"), "-startdate", "20300101000000Z", "-enddate",
                "20310101000000Z")

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def not_after(self, cert):
        out = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-enddate"], check=True,
                             capture_output=True, text=True, timeout=60).stdout
        return ssl.cert_time_to_seconds(out.strip().split("=", 1)[1])

    def install(self, src, dst):
        """Replaces dst by src atomically (as a Secret update does)."""
        tmp = dst + ".tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)

    def overwrite_unseen(self, src, dst):
        """Writes src's bytes into dst in place, keeping what stat shows
        (inode, size, mtime): a change only a forced re-read can see."""
        st = os.stat(dst)
        data = self.read(src)
        if len(data) != st.st_size:
            raise AssertionError("%s and %s differ in size" % (src, dst))
        with open(dst, "r+b") as f:
            f.write(data)
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


PKI = None


def setUpModule():
    global PKI
    PKI = Pki()
    for ca in ("ca", "ca2"):
        PKI.ca(ca)
    PKI.leaf("server", "ca", "server", "IP:127.0.0.1,DNS:localhost")
    PKI.leaf("server2", "ca2", "server2", "IP:127.0.0.1,DNS:localhost")
    PKI.leaf("expired", "ca", "expired", "IP:127.0.0.1", days="-1")
    PKI.future("future", "ca")
    PKI.leaf("admin_uri", "ca", "uri-client", "URI:" + ADMIN_URI)
    PKI.leaf("admin_dns", "ca", "dns-client", "DNS:" + ADMIN_DNS)
    PKI.leaf("admin_cn", "ca", ADMIN_CN)
    PKI.leaf("other", "ca", "other-client", "URI:" + OTHER_URI)
    PKI.leaf("stranger", "ca", "stranger-client", "URI:spiffe://cacheroute.test/stranger")
    PKI.leaf("foreign", "ca2", "foreign-client", "URI:" + ADMIN_URI)
    with open(PKI.path("token"), "w") as f:
        f.write(TOKEN + "\n")
    with open(PKI.path("garbage.pem"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")


def tearDownModule():
    shutil.rmtree(PKI.dir, True)


def tls_flags(cert="server", client_ca=None):
    f = ["--tls-cert", PKI.path(cert + ".pem"), "--tls-key", PKI.path(cert + ".key")]
    if client_ca:
        f += ["--tls-client-ca", PKI.path(client_ca + ".pem")]
    return f


def secure_channel(sc, ca="ca", client=None, port=None):
    """A TLS channel of its own (no subchannel shared with other channels)."""
    key = chain = None
    if client:
        chain, key = PKI.read(PKI.path(client + ".pem")), PKI.read(PKI.path(client + ".key"))
    creds = grpc.ssl_channel_credentials(PKI.read(PKI.path(ca + ".pem")), key, chain)
    ch = grpc.secure_channel("127.0.0.1:%d" % (port or sc.port), creds,
                             options=[("grpc.use_local_subchannel_pool", 1),
                                      ("grpc.enable_retries", 0)])
    sc._channels.append(ch)
    return ch


def check(ch, timeout=h.RPC_TIMEOUT):
    return P.health_grpc.HealthStub(ch).Check(P.health.HealthCheckRequest(), timeout=timeout)


class TlsTest(unittest.TestCase):
    def start(self, *flags, **kw):
        sc = h.Sidecar(*flags, **kw)
        self.addCleanup(sc.kill)
        return sc

    def assertUnavailable(self, ch):
        with self.assertRaises(grpc.RpcError) as cm:
            check(ch)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_tls_only(self):
        sc = self.start(*tls_flags())
        ch = secure_channel(sc)
        self.assertEqual(check(ch).status, P.health.HealthCheckResponse.SERVING)
        # R3-1: with authorization on, routing needs an identity
        with self.assertRaises(grpc.RpcError) as cm:
            sc.stub(ch).RecordArrival(P.cr.RecordArrivalRequest(owners=[7]),
                                      timeout=h.RPC_TIMEOUT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("--route-identity", cm.exception.details())
        self.assertUnavailable(sc.channel())  # plaintext on a TLS port
        self.assertUnavailable(secure_channel(sc, ca="ca2"))  # a server we do not trust
        sc.assert_clean_exit(self)

    def test_mtls_requires_a_verified_client(self):
        sc = self.start(*tls_flags(client_ca="ca"))
        self.assertEqual(check(secure_channel(sc, client="other")).status,
                         P.health.HealthCheckResponse.SERVING)
        self.assertUnavailable(secure_channel(sc))  # no client certificate
        self.assertUnavailable(secure_channel(sc, client="foreign"))  # another CA's
        sc.assert_clean_exit(self)

    def run_sidecar(self, *flags):
        return subprocess.run([h.ARGS.sidecar, "--listen", "127.0.0.1:0", "--metrics-listen", ""]
                              + list(flags), capture_output=True, text=True,
                              env=h.clean_env(), timeout=h.START_TIMEOUT)

    def test_start_up_checks_name_the_file(self):
        srv, key = PKI.path("server.pem"), PKI.path("server.key")
        missing = PKI.path("missing.pem")
        cases = [
            (["--tls-cert", srv, "--tls-key", PKI.path("other.key")],
             "--tls-key " + PKI.path("other.key"), "does not match"),
            (["--tls-cert", PKI.path("expired.pem"), "--tls-key", PKI.path("expired.key")],
             "--tls-cert " + PKI.path("expired.pem"), "expired at"),
            (["--tls-cert", PKI.path("future.pem"), "--tls-key", PKI.path("future.key")],
             "--tls-cert " + PKI.path("future.pem"), "not valid before 2030-01-01 00:00:00 UTC"),
            (["--tls-cert", missing, "--tls-key", key], "--tls-cert " + missing,
             "cannot read"),
            (["--tls-cert", srv, "--tls-key", PKI.dir], "--tls-key " + PKI.dir, "cannot read"),
            (["--tls-cert", srv, "--tls-key", srv], "--tls-key " + srv, "no PEM private key"),
            (["--tls-cert", key, "--tls-key", key], "--tls-cert " + key, "no PEM certificate"),
            (tls_flags() + ["--tls-client-ca", PKI.path("garbage.pem")],
             "--tls-client-ca " + PKI.path("garbage.pem"), "PEM certificates"),
            (tls_flags() + ["--tls-client-ca", PKI.path("token")],
             "--tls-client-ca " + PKI.path("token"), "no PEM certificate"),
            (["--tls-cert", srv], "--tls-cert needs --tls-key", ""),
            (["--admin-identity", ADMIN_URI] + tls_flags(),
             "--admin-identity needs --tls-client-ca", ""),
            (["--admin-token-file", missing], "--admin-token-file " + missing, "cannot read"),
        ]
        for flags, name, why in cases:
            p = self.run_sidecar(*flags)
            self.assertEqual(p.returncode, 2, (flags, p.stderr))
            # One line that is not a JSON log line (gRPC core may still log
            # while it shuts down).
            plain = [ln for ln in p.stderr.splitlines() if not ln.startswith("{")]
            self.assertEqual(len(plain), 1, p.stderr)
            self.assertTrue(plain[0].startswith("cacheroute-sidecar: "), plain[0])
            self.assertIn(name, plain[0])
            self.assertIn(why, plain[0])

    def test_expiry_gauge_is_not_after(self):
        sc = self.start(*tls_flags(), "--metrics-listen", "127.0.0.1:0", metrics=False)
        want = PKI.not_after(PKI.path("server.pem"))
        url = "http://127.0.0.1:%d/metrics" % sc.config["metrics_port"]
        text = urllib.request.urlopen(url, timeout=h.RPC_TIMEOUT).read().decode()
        m = re.search(r"^cacheroute_tls_cert_expiry_timestamp_seconds (\S+)$", text, re.M)
        self.assertIsNotNone(m, text[-2000:])
        self.assertEqual(float(m.group(1)), want)
        self.assertIn("# TYPE cacheroute_tls_cert_expiry_timestamp_seconds gauge", text)
        sc.assert_clean_exit(self)

    def test_rotation_under_live_connections(self):
        work = tempfile.mkdtemp(dir=PKI.dir)
        cert, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
        PKI.install(PKI.path("server.pem"), cert)
        PKI.install(PKI.path("server.key"), key)
        sc = self.start("--tls-cert", cert, "--tls-key", key, "--metrics-listen", "127.0.0.1:0",
                        "--route-access", "anyone", metrics=False)
        old = secure_channel(sc)
        stub = sc.stub(old)
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
        # A watch stays open across the rotation.
        watch = P.health_grpc.HealthStub(old).Watch(P.health.HealthCheckRequest(),
                                                    timeout=60)
        self.assertEqual(next(watch).status, P.health.HealthCheckResponse.SERVING)

        # Rotate to another CA's certificate, key first (as a Secret swap may).
        PKI.install(PKI.path("server2.key"), key)
        PKI.install(PKI.path("server2.pem"), cert)
        new = secure_channel(sc, ca="ca2")
        self.assertEqual(check(new).status, P.health.HealthCheckResponse.SERVING)
        self.assertUnavailable(secure_channel(sc, ca="ca"))  # new handshakes: the new cert
        for i in range(3):  # the old connection still works
            stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[2 + i]),
                               timeout=h.RPC_TIMEOUT)
        self.assertTrue(watch.is_active())
        sc.wait_for(lambda e: e.get("msg") == "tls files reloaded", 10)
        url = "http://127.0.0.1:%d/metrics" % sc.config["metrics_port"]
        text = urllib.request.urlopen(url, timeout=h.RPC_TIMEOUT).read().decode()
        self.assertIn("cacheroute_tls_cert_expiry_timestamp_seconds %d\n"
                      % PKI.not_after(PKI.path("server2.pem")), text)

        # A rotated pair that does not match is refused; the last good stays.
        PKI.install(PKI.path("server.pem"), cert)
        self.assertEqual(check(secure_channel(sc, ca="ca2")).status,
                         P.health.HealthCheckResponse.SERVING)
        err = sc.wait_for(lambda e: e.get("msg", "").startswith("tls files refused"), 10)
        self.assertEqual(err["level"], "error")
        self.assertIn("does not match", err["error"])

        # SIGHUP re-reads the files, even a change stat cannot see (EC keys
        # are all 241 bytes); it never stops the sidecar.
        PKI.overwrite_unseen(PKI.path("server.key"), key)
        sc.send(signal.SIGHUP)
        sc.wait_for(lambda e: e.get("msg") == "tls files reloaded"
                    and e.get("trigger") == "reload", 10)
        self.assertEqual(check(secure_channel(sc, ca="ca")).status,
                         P.health.HealthCheckResponse.SERVING)
        watch.cancel()
        sc.assert_clean_exit(self)

    def test_health_listen_is_plaintext_health_only(self):
        sc = self.start(*tls_flags(client_ca="ca"), "--health-listen", "127.0.0.1:0")
        port = sc.config["health_port"]
        self.assertGreater(port, 0)
        plain = grpc.insecure_channel("127.0.0.1:%d" % port)
        sc._channels.append(plain)
        self.assertEqual(check(plain).status, P.health.HealthCheckResponse.SERVING)
        with self.assertRaises(grpc.RpcError) as cm:
            sc.stub(plain).GetStats(P.cr.GetStatsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertUnavailable(sc.channel())  # the main port stays TLS only
        sc.assert_clean_exit(self)


class Call:
    """One guarded or open call, made with or without a bearer token."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn


def guarded_calls():
    return [
        Call("Plan", lambda s, md: s.Plan(P.cr.PlanRequest(from_estimator=True, install=True),
                                          metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("Forget", lambda s, md: s.Forget(P.cr.ForgetRequest(owners=[1]), metadata=md,
                                              timeout=h.RPC_TIMEOUT)),
        Call("ReportOutcome", lambda s, md: s.ReportOutcome(
            P.cr.ReportOutcomeRequest(outcomes=[P.cr.Outcome(request_id="r", ttft_ms=5)]),
            metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("ClearReservations", lambda s, md: s.ClearReservations(
            P.cr.ClearReservationsRequest(), metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("ReportKvEvents", lambda s, md: s.ReportKvEvents(
            P.cr.ReportKvEventsRequest(events=[P.cr.KvEvent(
                shard=0, all_blocks_cleared=P.cr.KvAllBlocksCleared())]),
            metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("SetEndpoints", lambda s, md: s.SetEndpoints(P.cr.SetEndpointsRequest(
            endpoints=[P.cr.Endpoint(id="e0", address="h:1")]), metadata=md,
            timeout=h.RPC_TIMEOUT)),
        Call("DrainEndpoint", lambda s, md: s.DrainEndpoint(
            P.cr.DrainEndpointRequest(id="e0", undrain=True), metadata=md,
            timeout=h.RPC_TIMEOUT)),
        Call("ListEndpoints", lambda s, md: s.ListEndpoints(P.cr.ListEndpointsRequest(),
                                                            metadata=md,
                                                            timeout=h.RPC_TIMEOUT)),
        # a stream: allowed, it waits for a change (its deadline ends it)
        Call("WatchEndpoints", lambda s, md: next(s.WatchEndpoints(
            P.cr.WatchEndpointsRequest(), metadata=md, timeout=0.3))),
        # --reservations admins, the default: reserving is an admin's.
        Call("SelectInjection", lambda s, md: s.SelectInjection(
            P.cr.SelectInjectionRequest(prompt_tokens=100, knowledge_tokens=100, dry_run=False),
            metadata=md, timeout=h.RPC_TIMEOUT)),
    ]


def routing_calls():
    """Calls whose routes count toward every client's: an identity's."""
    return [
        Call("RecordArrival", lambda s, md: s.RecordArrival(
            P.cr.RecordArrivalRequest(owners=[3]), metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("RecordArrivals", lambda s, md: list(s.RecordArrivals(
            iter([P.cr.RecordArrivalRequest(owners=[3])]), metadata=md,
            timeout=h.RPC_TIMEOUT))),
        Call("Route", lambda s, md: s.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
            owner=3, prompt_tokens=10000000)]), metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("Routes", lambda s, md: list(s.Routes(iter([P.cr.RouteRequest(requests=[
            P.cr.RouteItem(owner=3, prompt_tokens=10000000)])]), metadata=md,
            timeout=h.RPC_TIMEOUT))),
    ]


def open_calls():
    return [
        Call("Plan", lambda s, md: s.Plan(P.cr.PlanRequest(from_estimator=True), metadata=md,
                                          timeout=h.RPC_TIMEOUT)),
        Call("GetRates", lambda s, md: s.GetRates(P.cr.GetRatesRequest(), metadata=md,
                                                  timeout=h.RPC_TIMEOUT)),
        Call("SelectInjection", lambda s, md: s.SelectInjection(
            P.cr.SelectInjectionRequest(prompt_tokens=100, knowledge_tokens=100, dry_run=True),
            metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("GetStats", lambda s, md: s.GetStats(P.cr.GetStatsRequest(), metadata=md,
                                                  timeout=h.RPC_TIMEOUT)),
        Call("GetNodeProfile", lambda s, md: s.GetNodeProfile(
            P.cr.GetNodeProfileRequest(), metadata=md, timeout=h.RPC_TIMEOUT)),
        Call("GetDecision", lambda s, md: s.GetDecision(  # NOT_FOUND, but not refused
            P.cr.GetDecisionRequest(request_id="none"), metadata=md, timeout=h.RPC_TIMEOUT)),
    ]


BEARER = (("authorization", "Bearer " + TOKEN),)


class AuthzTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sc = h.Sidecar(*tls_flags(client_ca="ca"), "--admin-identity", ADMIN_URI,
                           "--admin-identity", ADMIN_DNS, "--admin-identity", ADMIN_CN,
                           "--admin-token-file", PKI.path("token"))

    @classmethod
    def tearDownClass(cls):
        cls.sc.kill()

    def stub(self, client):
        return self.sc.stub(secure_channel(self.sc, client=client))

    def assertAllowed(self, call, stub, md=()):
        try:
            call.fn(stub, md)
        except grpc.RpcError as e:  # refused for what it asks, not for who asks
            self.assertNotEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED,
                                (call.name, e.details()))

    def assertDenied(self, call, stub, md=()):
        with self.assertRaises(grpc.RpcError) as cm:
            call.fn(stub, md)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED, call.name)
        self.assertIn(h.SERVICE + call.name, cm.exception.details())
        if call.name == "Plan":
            self.assertIn("with install=true", cm.exception.details())
        if call.name == "SelectInjection":
            self.assertIn("with dry_run=false", cm.exception.details())
        if call.name.startswith(("Route", "RecordArrival")):
            self.assertIn("--route-identity", cm.exception.details())

    def test_admin_identities(self):
        for client in ("admin_uri", "admin_dns", "admin_cn"):
            stub = self.stub(client)
            for call in guarded_calls() + open_calls() + routing_calls():
                self.assertAllowed(call, stub)

    def test_other_identity(self):
        stub = self.stub("other")
        for call in guarded_calls() + routing_calls():
            self.assertDenied(call, stub)
        for call in open_calls():
            self.assertAllowed(call, stub)
        self.assertEqual(check(secure_channel(self.sc, client="other")).status,
                         P.health.HealthCheckResponse.SERVING)

    def test_bearer_token(self):
        stub = self.stub("other")
        wrong = [(("authorization", "Bearer " + TOKEN[:-1]),),
                 (("authorization", "Bearer " + TOKEN + "x"),),
                 (("authorization", TOKEN),), (("authorization", "Bearer "),),
                 (("x-token", TOKEN),)]
        for call in guarded_calls() + routing_calls():
            self.assertAllowed(call, stub, BEARER)
            self.assertAllowed(call, stub, (("authorization", "bearer " + TOKEN),))
            for md in wrong:
                self.assertDenied(call, stub, md)


    def cli(self, *args):
        return subprocess.run([h.ARGS.cli, "--target", self.sc.target] + list(args),
                              capture_output=True, text=True, timeout=h.RPC_TIMEOUT * 2)

    def test_cli_speaks_tls(self):
        ca = ["--tls-ca", PKI.path("ca.pem")]
        other = ca + ["--tls-cert", PKI.path("other.pem"), "--tls-key", PKI.path("other.key")]
        admin = ca + ["--tls-cert", PKI.path("admin_uri.pem"), "--tls-key",
                      PKI.path("admin_uri.key")]
        p = self.cli(*other, "health")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("SERVING", p.stdout)
        p = self.cli(*other, "forget", "1")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("PERMISSION_DENIED", p.stderr)
        for args in (other + ["--token-file", PKI.path("token")], admin):
            p = self.cli(*args, "forget", "1")
            self.assertEqual(p.returncode, 0, (args, p.stderr))
        self.assertEqual(self.cli("--timeout", "3", "health").returncode, 1)  # plaintext
        self.assertEqual(self.cli(*ca, "--timeout", "3", "health").returncode, 1)  # no cert
        p = self.cli(*ca, "--tls-cert", PKI.path("other.pem"), "health")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tls-cert needs --tls-key", p.stderr)
        p = self.cli("--tls-ca", PKI.path("missing.pem"), "health")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--tls-ca " + PKI.path("missing.pem"), p.stderr)


class OpenAndTokenOnlyTest(unittest.TestCase):
    def test_no_security_warns_once_and_stays_open(self):
        sc = h.Sidecar()
        self.addCleanup(sc.kill)
        stub = sc.stub()
        for call in guarded_calls() + open_calls():
            try:
                call.fn(stub, ())
            except grpc.RpcError as e:
                self.assertNotEqual(e.code(), grpc.StatusCode.PERMISSION_DENIED)
        sc.assert_clean_exit(self)
        warns = [e for e in sc.events if e.get("msg") == NO_SECURITY]
        self.assertEqual(len(warns), 1)
        self.assertEqual(warns[0]["level"], "warn")

    def test_tls_does_not_warn(self):
        sc = h.Sidecar(*tls_flags())
        self.addCleanup(sc.kill)
        sc.assert_clean_exit(self)
        self.assertEqual([e for e in sc.events if e.get("msg") == NO_SECURITY], [])

    def test_token_without_tls_and_its_rotation(self):
        token = os.path.join(tempfile.mkdtemp(dir=PKI.dir), "token")
        PKI.install(PKI.path("token"), token)
        sc = h.Sidecar("--admin-token-file", token)
        self.addCleanup(sc.kill)
        stub = sc.stub()
        forget = guarded_calls()[1]

        def denied(md):
            with self.assertRaises(grpc.RpcError) as cm:
                forget.fn(stub, md)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

        denied(())
        forget.fn(stub, BEARER)
        sc.stub().GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        # A replaced token file (a Secret update) counts from the next call.
        with open(token + ".new", "w") as f:
            f.write("rotated-token\n")
        os.replace(token + ".new", token)
        denied(BEARER)
        forget.fn(stub, (("authorization", "Bearer rotated-token"),))
        sc.wait_for(lambda e: e.get("msg") == "admin token reloaded", 10)
        # An empty one is refused; the last good token stays.
        with open(token + ".new", "w") as f:
            f.write("\n")
        os.replace(token + ".new", token)
        forget.fn(stub, (("authorization", "Bearer rotated-token"),))
        err = sc.wait_for(lambda e: e.get("msg", "").startswith("admin token file refused"), 10)
        self.assertEqual(err["level"], "error")
        self.assertIn("empty token", err["error"])
        sc.assert_clean_exit(self)

    def test_deleted_token_file_revokes_the_token(self):
        # Deleting the token file used to leave the old token valid.
        token = os.path.join(tempfile.mkdtemp(dir=PKI.dir), "token")
        PKI.install(PKI.path("token"), token)
        os.chmod(token, 0o600)
        sc = h.Sidecar("--admin-token-file", token)
        self.addCleanup(sc.kill)
        stub = sc.stub()
        forget = guarded_calls()[1]
        forget.fn(stub, BEARER)
        os.unlink(token)
        with self.assertRaises(grpc.RpcError) as cm:
            forget.fn(stub, BEARER)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        ev = sc.wait_for(lambda e: e.get("msg", "").startswith("admin token file gone"), 10)
        self.assertEqual(ev["level"], "warn")
        # Back (a Secret re-created): accepted again.
        PKI.install(PKI.path("token"), token)
        os.chmod(token, 0o600)
        forget.fn(stub, BEARER)
        sc.assert_clean_exit(self)

    def test_token_file_writable_by_others_is_refused(self):
        # A token file others may write was accepted without a word; one
        # others may only read (a Secret volume's 0644) still is.
        token = os.path.join(tempfile.mkdtemp(dir=PKI.dir), "token")
        PKI.install(PKI.path("token"), token)
        for mode in (0o666, 0o620, 0o602):
            os.chmod(token, mode)
            p = h.run_sidecar("--admin-token-file", token, "--listen", "127.0.0.1:0")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("writable by group or others", p.stderr)
        os.chmod(token, 0o644)
        sc = h.Sidecar("--admin-token-file", token)
        self.addCleanup(sc.kill)
        guarded_calls()[1].fn(sc.stub(), BEARER)
        # Made writable later: refused at the next check, the token stays.
        os.chmod(token, 0o666)
        with open(token, "a") as f:
            f.write("\n")  # a new size: read again
        guarded_calls()[1].fn(sc.stub(), BEARER)
        err = sc.wait_for(lambda e: e.get("msg", "").startswith("admin token file refused"), 10)
        self.assertIn("writable by group or others", err["error"])
        sc.assert_clean_exit(self)

    def test_fifo_token_file_refused_at_once(self):
        # N9: a FIFO as --admin-token-file blocked the start forever.
        fifo = os.path.join(tempfile.mkdtemp(dir=PKI.dir), "token")
        os.mkfifo(fifo)
        t0 = time.monotonic()
        p = h.run_sidecar("--admin-token-file", fifo, "--listen", "127.0.0.1:0", timeout=10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("must be a regular file", p.stderr)



varint = h.varint


PAST_64 = b"\x80" * 9 + b"\x02"   # a set bit past bit 64 (a scanner kept 64 bits)
TOP_7E = b"\x80" * 9 + b"\x7e"
LONG_ZERO = b"\x80" * 9 + b"\x00"  # ten bytes, every bit clear
RATE = b"\x12\x0b\x08\x07\x11" + b"\x00" * 6 + b"\x14\x40"  # rates {owner 7, rate 5}


def bool_encodings(key):
    """(name, bytes) of field key's bool in every shape a reader may take
    differently: overlong, past 64 bits, repeated (the last wins), unknown
    fields before and after, a length-delimited form, malformed."""
    k = bytes([key << 3])
    return [
        ("canonical true", k + b"\x01"),
        ("canonical false", k + b"\x00"),
        ("value 2", k + b"\x02"),
        ("overlong 1", k + b"\x81\x00"),
        ("ten-byte 1", k + b"\x81" + b"\x80" * 8 + b"\x00"),
        ("past bit 64", k + PAST_64),
        ("0x7e in the tenth byte", k + TOP_7E),
        ("ten-byte 0", k + LONG_ZERO),
        ("false then true", k + b"\x00" + k + b"\x01"),
        ("true then false", k + b"\x01" + k + b"\x00"),
        ("false then past bit 64", k + b"\x00" + k + PAST_64),
        ("true then ten-byte 0", k + b"\x01" + k + LONG_ZERO),
        ("unknown varint before", b"\xf8\x07\x01" + k + b"\x01"),
        ("unknown bytes after", k + b"\x01" + b"\xfa\x07\x00"),
        ("unknown field 2^29-1 before", b"\xf8\xff\xff\xff\x0f\x01" + k + b"\x01"),
        ("length-delimited", bytes([key << 3 | 2]) + b"\x01\x01"),
        ("eleven-byte varint", k + b"\x80" * 10 + b"\x01"),
        ("split around a field", k + b"\x00" + b"\xf8\x07\x05" + k + b"\xff\x01"),
    ]


class EveryEncodingTest(unittest.TestCase):
    """N1: a Plan whose install is a 10-byte varint with a bit past 64
    installed a table without credentials: the admin check read the bytes
    with its own scanner, protobuf-c read them otherwise. Every admin
    method, every encoding of every field that makes it admin-only: without
    credentials nothing changes; with them, what protobuf-c reads as
    state-changing is what was refused."""

    @classmethod
    def setUpClass(cls):
        cls.token = os.path.join(tempfile.mkdtemp(dir=PKI.dir), "token")
        PKI.install(PKI.path("token"), cls.token)
        cls.sc = h.Sidecar("--admin-token-file", cls.token, "--replan-interval", "0")
        cls.ch = cls.sc.channel()
        cls.sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 2, 3]),
                                    metadata=BEARER, timeout=h.RPC_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.sc.kill()

    def call(self, method, body, md=()):
        try:
            self.ch.unary_unary(h.SERVICE + method)(body, metadata=md, timeout=h.RPC_TIMEOUT)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()

    def generation(self):
        return self.sc.stub().RecordArrival(
            P.cr.RecordArrivalRequest(owners=[1], weights=[1e-300]), metadata=BEARER,
            timeout=h.RPC_TIMEOUT).table_generation

    def test_plan_install(self):
        denied = 0
        for name, enc in bool_encodings(4):
            for body in (b"\x18\x01" + enc, RATE + enc):
                before = self.generation()
                anon = self.call("Plan", body)
                self.assertEqual(self.generation(), before, (name, body.hex()))
                self.assertIn(anon, (grpc.StatusCode.OK, grpc.StatusCode.PERMISSION_DENIED,
                                     grpc.StatusCode.INVALID_ARGUMENT), name)
                admin = self.call("Plan", body, BEARER)
                installed = self.generation() > before
                self.assertEqual(admin == grpc.StatusCode.OK, anon != grpc.StatusCode.INVALID_ARGUMENT,
                                 name)
                # Refused without credentials exactly when it installs with them.
                self.assertEqual(anon == grpc.StatusCode.PERMISSION_DENIED, installed,
                                 (name, body.hex(), anon, admin))
                denied += installed
        self.assertGreaterEqual(denied, 20)
        # The red team's bodies, by name.
        for body in (RATE + b"\x20" + PAST_64, RATE + b"\x20" + TOP_7E,
                     RATE + b"\x20\x00\x20" + PAST_64):
            self.assertEqual(self.call("Plan", body), grpc.StatusCode.PERMISSION_DENIED)

    def test_select_injection_reserve(self):
        base = varint(2 << 3) + varint(100) + varint(3 << 3) + varint(100)
        denied = 0
        for i, (name, enc) in enumerate(bool_encodings(7)):
            rid = ("enc-%02d" % i).encode()
            body = b"\x0a" + bytes([len(rid)]) + rid + base + enc
            anon = self.call("SelectInjection", body)
            admin = self.call("SelectInjection", body, BEARER)
            reserved = admin == grpc.StatusCode.OK and self.call(
                "GetDecision", b"\x0a" + bytes([len(rid)]) + rid) == grpc.StatusCode.OK
            # A dry run keeps no receipt: a receipt says it reserved.
            self.assertEqual(anon == grpc.StatusCode.PERMISSION_DENIED, reserved,
                             (name, body.hex(), anon, admin))
            denied += reserved
        self.assertGreaterEqual(denied, 4)
        # Without the field at all it reserves: an admin's.
        self.assertEqual(self.call("SelectInjection", base), grpc.StatusCode.PERMISSION_DENIED)

    def test_admin_only_methods_any_body(self):
        bodies = [b"", b"\x08\x01", b"\x08" + PAST_64, b"\xf8\x07\x01", b"\x0a\x00",
                  b"\x12\x01x", b"\x08\x01\x08\x02"]
        for method in ("Forget", "ReportOutcome", "ClearReservations"):
            for body in bodies:
                self.assertEqual(self.call(method, body), grpc.StatusCode.PERMISSION_DENIED,
                                 (method, body.hex()))


def scrape(sc):
    """/metrics as {sample name with labels: value}."""
    url = "http://127.0.0.1:%d/metrics" % sc.config["metrics_port"]
    text = urllib.request.urlopen(url, timeout=h.RPC_TIMEOUT).read().decode()
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                     if line and not line.startswith("#"))}


def work(m):
    return sum(v for k, v in m.items() if k.startswith("cacheroute_route_outstanding_work{"))


class RouteAttackTest(unittest.TestCase):
    """R3-1 and R3-2 (issue 30), with authorization on (mTLS): a gateway
    (an admin identity) routes 100 requests, then 100 more with request ids
    and reports their outcomes. On one sidecar nobody else calls; on the
    other, between the gateway's batches, an unidentified client (a
    certificate the CA signed, listed nowhere) sends the round-three R3-1
    Route (7 requests of 10,000,000 prompt tokens) and its RecordArrival
    and stream forms, and another identity (--route-identity) routes the
    gateway's next 100 request ids first, then 3 calls of 4,096 requests at
    --inflight-max 10000. The gateway's second batch routes within 10% of
    the quiet sidecar's, all its routes stay outstanding, and its outcomes
    release its own work."""

    GAP_S = 1.5  # from the first batch to the second, on both sidecars

    def start(self):
        sc = h.Sidecar(*tls_flags(client_ca="ca"), "--admin-identity", ADMIN_URI,
                       "--route-identity", OTHER_URI, "--inflight-max", "10000",
                       "--inflight-per-caller", "200", "--metrics-listen", "127.0.0.1:0",
                       "--replan-interval", "0", metrics=False)
        self.addCleanup(sc.kill)
        return sc

    def batch(self, tag):
        return P.cr.RouteRequest(requests=[P.cr.RouteItem(
            owner=1000 + i, prompt_tokens=8000, request_id="%s-%d" % (tag, i))
            for i in range(100)])

    def attack_unidentified(self, sc):
        stub = sc.stub(secure_channel(sc, client="stranger"))
        for call in routing_calls():
            with self.assertRaises(grpc.RpcError) as cm:
                call.fn(stub, ())
            self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED, call.name)
            self.assertIn("--route-identity", cm.exception.details())
        seven = P.cr.RouteRequest(requests=[P.cr.RouteItem(prompt_tokens=10000000)] * 7)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Route(seven, timeout=h.RPC_TIMEOUT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def squat_and_flood(self, sc):
        other = sc.stub(secure_channel(sc, client="other"))
        other.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
            prompt_tokens=1, request_id="g2-%d" % i) for i in range(100)]),
            timeout=h.RPC_TIMEOUT)
        return other

    def run_gateway(self, attacked):
        sc = self.start()
        gw = sc.stub(secure_channel(sc, client="admin_uri"))
        t0 = time.monotonic()
        gw.Route(self.batch("g1"), timeout=h.RPC_TIMEOUT)
        other = None
        if attacked:
            self.attack_unidentified(sc)
            other = self.squat_and_flood(sc)
        time.sleep(max(0, t0 + self.GAP_S - time.monotonic()))
        second = gw.Route(self.batch("g2"), timeout=h.RPC_TIMEOUT).routes
        if attacked:
            flood = P.cr.RouteRequest(requests=[P.cr.RouteItem(prompt_tokens=1)] * 4096)
            for _ in range(3):
                other.Route(flood, timeout=h.RPC_TIMEOUT)
        m = scrape(sc)
        mine = 200  # both the gateway's batches
        theirs = 200 if attacked else 0  # the other identity's quota
        self.assertEqual(m["cacheroute_route_outstanding"], mine + theirs)
        if attacked:
            self.assertEqual(m["cacheroute_route_refused_total"], 3 * 4096 - 100)
        # the gateway's outcomes release the gateway's second batch
        gw.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(request_id="g2-%d" % i, prompt_tokens=8000) for i in range(100)]),
            timeout=h.RPC_TIMEOUT)
        after = scrape(sc)
        self.assertEqual(after["cacheroute_route_outstanding"], mine + theirs - 100)
        released = work(m) - work(after)
        self.assertAlmostEqual(released, sum(d.prefill_ms for d in second),
                               delta=0.01 * released)
        sc.assert_clean_exit(self)
        return second

    def test_attacks_leave_the_gateway_alone(self):
        quiet = self.run_gateway(False)
        attacked = self.run_gateway(True)
        waits = [sum(d.queue_wait_ms for d in r) for r in (quiet, attacked)]
        self.assertLessEqual(abs(waits[1] - waits[0]), 0.1 * waits[0], waits)
        for r in (quiet, attacked):
            shards = [sum(d.shard == s for d in r) for s in range(8)]
            self.assertLessEqual(max(shards), 1.1 * 100 / 8 + 1, shards)


if __name__ == "__main__":
    h.main()
