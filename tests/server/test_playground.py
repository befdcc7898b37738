"""The playground at / in headless Chromium (docs/serving.md): the page loads from the binary,
a message (sent through /?q=) streams a reply token by token with logprobs and the drafter's
marks, and the console shows no error (DevTools protocol over a pipe). Writes build/artifacts/playground.png for humans.
Oracle: the reply the same request gets through the API (greedy), and Chromium's own console."""
import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_support import MODEL, ROOT, serve  # noqa: E402

BUILD = os.environ.get("LOCKSTEP_BUILD_DIR", os.path.join(ROOT, "build"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """Headless Chromium driven over the DevTools protocol on --remote-debugging-pipe (fds 3
    and 4, messages ended by NUL): no WebSocket client needed."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="lockstep-chromium-")
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        # Keep the child's ends above 4 so the dup2 onto 3 and 4 cannot clobber one another.
        to_r, from_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_r, from_w))

        def fds():
            os.dup2(to_r, 3)  # dup2 leaves 3 and 4 inheritable; every other fd is close-on-exec
            os.dup2(from_w, 4)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--window-size=1200,800",
             "about:blank"], close_fds=False, preexec_fn=fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.next_id, self.events, self.replies = 1, [], {}
        self.inbox = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            data = os.read(self.from_r, 1 << 16)
            if not data:
                return
            buf += data
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self.inbox.put(json.loads(msg))

    def call(self, method, params=None, session=None, timeout=60):
        mid = self.next_id
        self.next_id += 1
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                m = self.inbox.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)
        raise TimeoutError(f"{method}: no answer in {timeout} s")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - killed below anyway
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)


class Playground(unittest.TestCase):
    def test_page_streams_a_reply_without_console_errors(self):
        self.assertIsNotNone(CHROMIUM, "chromium is not installed (ci/deps installs it)")
        with serve("--model", f"spec={MODEL}+ngram", "--ctx", "512") as srv:
            status, hdrs, page = srv.get("/")
            self.assertEqual(status, 200)
            self.assertNotRegex(page, r"(src|href)=\"https?://")  # nothing from a CDN
            msg = "Count from 1 to 20 separated by commas."
            status, _, ref = srv.post("/v1/chat/completions", {
                "model": "spec", "messages": [{"role": "user", "content": msg}], "max_tokens": 128,
                "temperature": 0, "top_p": 1, "top_k": 0, "seed": 0})
            self.assertEqual(status, 200, ref)
            b = Browser()
            try:
                target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
                sess = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
                for domain in ("Runtime", "Log", "Page"):
                    b.call(domain + ".enable", session=sess)
                b.call("Page.navigate", {"url": srv.base + "/?q=" + msg.replace(" ", "%20")}, session=sess)

                def js(expr):
                    r = b.call("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                               session=sess)
                    return r["result"].get("value")
                deadline, seen_partial = time.time() + 90, False
                while time.time() < deadline:
                    state = js("(() => { const d = document.querySelector('.msg.assistant');"
                               " return d ? d.dataset.done + ':' + d.querySelectorAll('.tok').length : ''; })()")
                    if state and state.startswith("0:") and int(state[2:]) > 0:
                        seen_partial = True  # tokens shown while the reply still streams
                    if state and state.startswith("1:"):
                        break
                    time.sleep(0.02)
                self.assertTrue(state and state.startswith("1:"), f"no finished reply: {state}")
                toks = js("Array.from(document.querySelectorAll('.msg.assistant .tok'))"
                          ".map(s => [s.className, s.textContent, s.title])")
                self.assertGreater(len(toks), 3)
                self.assertTrue(seen_partial, "the reply appeared at once, not streamed")
                self.assertEqual("".join(t[1] for t in toks), ref["choices"][0]["message"]["content"])
                self.assertTrue(all(t[2].startswith("logprob ") for t in toks))
                self.assertIn("tok accepted", [t[0] for t in toks])  # the n-gram drafter's tokens
                self.assertRegex(js("document.getElementById('stats').textContent"),
                                 r"^\d+ tokens, [\d.]+ tok/s")
                os.makedirs(os.path.join(BUILD, "artifacts"), exist_ok=True)
                shot = os.path.join(BUILD, "artifacts", "playground.png")
                png = b.call("Page.captureScreenshot", {"format": "png"}, session=sess)["data"]
                with open(shot, "wb") as f:
                    f.write(base64.b64decode(png))
                print(f"screenshot: {shot}")
                b.call("Runtime.evaluate", {"expression": "1"}, session=sess)  # flush events
                errors = [e for e in b.events
                          if e.get("method") == "Runtime.exceptionThrown"
                          or (e.get("method") == "Runtime.consoleAPICalled"
                              and e["params"]["type"] in ("error", "assert"))
                          or (e.get("method") == "Log.entryAdded"
                              and e["params"]["entry"]["level"] == "error")]
                self.assertEqual(errors, [])
            finally:
                b.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
