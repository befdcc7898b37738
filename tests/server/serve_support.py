"""Starts `lockstep serve` on a free loopback port for a test and always kills it (docs/serving.md).

Every wait is bounded; the server's stderr goes to a log file the failure message quotes.
"""
import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.environ.get("LOCKSTEP_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BIN = os.path.join(os.environ.get("LOCKSTEP_BUILD_DIR", os.path.join(ROOT, "build")), "bin", "lockstep")
MODEL = "smollm2-135m"


class Server:
    def __init__(self, *args, boot_timeout=90):
        self.log = tempfile.NamedTemporaryFile(prefix="lockstep-serve-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        self.proc = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + boot_timeout
        self.port = None
        while time.time() < deadline:
            text = self.text()
            if "listening on http://127.0.0.1:" in text:
                self.port = int(text.split("listening on http://127.0.0.1:")[1].split()[0])
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"lockstep serve exited {self.proc.returncode} at boot:\n{text}")
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise RuntimeError(f"lockstep serve did not listen within {boot_timeout} s:\n{self.text()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def client(self, api_key="none", timeout=120):
        import openai
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, timeout=timeout,
                             max_retries=0)

    def post(self, path, body, headers=None, timeout=120):
        """(status, headers, parsed JSON or text) of a raw POST; body bytes, str or a JSON value."""
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        req = urllib.request.Request(self.base + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        return self._do(req, timeout)

    def get(self, path, headers=None, timeout=30):
        return self._do(urllib.request.Request(self.base + path, headers=headers or {}), timeout)

    @staticmethod
    def _do(req, timeout):
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                data = r.read().decode()
                status, hdrs = r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            data = e.read().decode()
            status, hdrs = e.code, dict(e.headers)
        try:
            return status, hdrs, json.loads(data)
        except ValueError:
            return status, hdrs, data


@contextlib.contextmanager
def serve(*args, **kw):
    s = Server(*args, **kw)
    try:
        yield s
    finally:
        s.kill()


def run_cli(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"lockstep {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r.stdout
