#!/usr/bin/env python3
"""The portal's login driven the way a person meets it: Debian's headless Chromium, through
ChromeDriver's W3C WebDriver protocol (Python's standard library only), opens the portal, fills
the login form, lands on the page behind it, logs out through the dashboard's /logout, and finds
the session gone. A screenshot of each step goes into OUTDIR.

Run by PortalApacheTest inside its private network namespace, where Apache serves the portal on
127.0.0.1. Chromium trusts the portal's certificate by its public key alone (SPKI pin).

usage: portal_browser.py BASE_URL USER SPKI_SHA256_BASE64 OUTDIR MARKER < password
Prints one line per check, "PASS what" or "FAIL what: detail"; exit 0 when it could run.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

DRIVER = "http://127.0.0.1:9515"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def call(method, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(DRIVER + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)["value"]
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{method} {path}: HTTP {e.code}: {e.read()[:300]!r}") from None


def main():
    # A timeout's SIGTERM still closes the browser (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    base, user, spki, outdir, marker = sys.argv[1:6]
    password = sys.stdin.read().rstrip("\n")
    os.makedirs(outdir, exist_ok=True)
    results = []

    def check(ok, what, detail=""):
        results.append(f"PASS {what}" if ok else f"FAIL {what}: {detail}")
        print(results[-1], flush=True)

    profile = tempfile.mkdtemp(prefix="onehpc-chromium.")
    driver = subprocess.Popen(["chromedriver", "--port=9515"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    session = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if call("GET", "/status", timeout=5).get("ready"):
                    break
            except (OSError, RuntimeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("chromedriver did not become ready in 30 s")
            time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1024,768",
                         f"--user-data-dir={profile}",
                         f"--ignore-certificate-errors-spki-list={spki}"],
            }}}}
        session = call("POST", "/session", caps, timeout=120)["sessionId"]
        s = f"/session/{session}"

        def shot(name):
            png = base64.b64decode(call("GET", s + "/screenshot"))
            with open(os.path.join(outdir, name), "wb") as f:
                f.write(png)
            return len(png)

        def element(css):
            return call("POST", s + "/element", {"using": "css selector", "value": css})[ELEMENT]

        call("POST", s + "/url", {"url": base + "/"})
        url = call("GET", s + "/url")
        source = call("GET", s + "/source")
        size = shot("1-login-page.png")
        check(url.startswith(base + "/one-hpc/login") and 'name="httpd_password"' in source,
              f"the browser opening {base}/ lands on the login form (1-login-page.png, "
              f"{size} bytes)", url)

        call("POST", s + f"/element/{element('#user')}/value", {"text": user})
        call("POST", s + f"/element/{element('#password')}/value", {"text": password})
        shot("2-form-filled.png")
        call("POST", s + f"/element/{element('button[type=submit]')}/click", {})
        deadline = time.monotonic() + 20
        while marker not in call("GET", s + "/source") and time.monotonic() < deadline:
            time.sleep(0.2)
        url = call("GET", s + "/url")
        size = shot("3-dashboard.png")
        check(marker in call("GET", s + "/source") and "/pun/sys/dashboard" in url,
              f"after the form it shows the page behind the login at {url} "
              f"(3-dashboard.png, {size} bytes)", url)
        cookies = {c["name"]: c for c in call("GET", s + "/cookie")}
        session_cookie = cookies.get("onehpc_session", {})
        check(session_cookie.get("secure") and session_cookie.get("httpOnly"),
              "the browser holds the session cookie as Secure and HttpOnly", str(cookies.keys()))

        call("POST", s + "/url", {"url": base + "/logout"})
        url = call("GET", s + "/url")
        source = call("GET", s + "/source")
        size = shot("4-logged-out.png")
        check(url.endswith("/one-hpc/login?out") and "You are logged out." in source,
              f"the dashboard's /logout ends on the login page saying so (4-logged-out.png, "
              f"{size} bytes)", url)

        call("POST", s + "/url", {"url": base + "/pun/sys/dashboard/"})
        url = call("GET", s + "/url")
        shot("5-after-logout.png")
        check(url == base + "/one-hpc/login",
              "after the logout the dashboard sends the browser back to the login form", url)
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        check(False, "the browser walk-through ran", str(e))
    finally:
        if session:
            try:
                call("DELETE", f"/session/{session}", timeout=30)
            except (OSError, RuntimeError):
                pass
        driver.terminate()
        try:
            driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            driver.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
