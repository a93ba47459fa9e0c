#!/usr/bin/python3
"""A real OpenID Connect provider for PortalApacheTest: Debian's Glewlwyd (package glewlwyd).

  oidc_provider.py start DIR --issuer-host HOST --port PORT --cert CRT --key KEY
                         --client ID:SECRET:REDIRECT_URI  < lines NAME:PASSWORD
    makes DIR/glewlwyd.conf and its SQLite database (the schema Debian ships), starts glewlwyd
    over HTTPS with CRT and KEY (pid in DIR/glewlwyd.pid), and sets it up through its own
    administration API, as an administrator of the site would: the OpenID Connect plugin
    (issuer https://HOST:PORT/api/oidc, code flow, RS256 with a key made here, the claim
    preferred_username from the user's name), the users, the portal's confidential client.
  oidc_provider.py login AUTHORIZE_URL --cacert CRT  < a line NAME:PASSWORD
    what a person does on the provider's login page (Glewlwyd's page is a JavaScript app; this
    makes the same API calls it makes): logs in with the password, grants the client the
    scope openid, and follows the authorization request; prints where the provider sends the
    browser back (the portal's redirect URI with the code), or exits 1 with what it answered.
  oidc_provider.py stop DIR

Python's standard library only. Every request has a timeout.
"""
import http.cookiejar
import json
import os
import signal
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

SCHEMA = "/usr/share/dbconfig-common/data/glewlwyd/install/sqlite3"
ADMIN = ("admin", "password")  # the schema's first administrator (replaced below)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def opener(cacert):
    ctx = ssl.create_default_context(cafile=cacert)
    return urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=ctx),
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect())


def call(op, method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with op.open(req, timeout=20) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def must(op, method, url, body=None):
    code, _, text = call(op, method, url, body)
    if code != 200:
        sys.exit(f"oidc_provider: {method} {url} answered {code}: {text[:300]}")
    return text


def arg_list(argv, name):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]


def arg(argv, name):
    found = arg_list(argv, name)
    if len(found) != 1:
        sys.exit(f"oidc_provider: {name} VALUE once, please")
    return found[0]


def start(d, argv):
    host, port = arg(argv, "--issuer-host"), int(arg(argv, "--port"))
    crt, key = arg(argv, "--cert"), arg(argv, "--key")
    client_id, secret, redirect = arg(argv, "--client").split(":", 2)
    users = [line.rstrip("\n").split(":", 1) for line in sys.stdin if ":" in line]
    os.makedirs(d, exist_ok=True)
    db = os.path.join(d, "glewlwyd.db")
    with sqlite3.connect(db) as c, open(SCHEMA) as schema:
        c.executescript(schema.read())
    conf = os.path.join(d, "glewlwyd.conf")
    with open(conf, "w") as f:
        f.write(f"""port={port}
bind_address="{host}"
external_url="https://{host}:{port}"
login_url="login.html"
api_prefix="api"
log_mode="file"
log_level="WARNING"
log_file="{d}/glewlwyd.log"
cookie_secure=1
cookie_same_site="lax"
session_expiration=3600
session_key="GLEWLWYD2_SESSION_ID"
admin_session_authentication="cookie"
profile_session_authentication="cookie"
allow_multiple_user_per_session=false
login_api_enabled=true
add_x_frame_option_header_deny=true
max_post_size=1048576
admin_scope="g_admin"
profile_scope="g_profile"
user_module_path="/usr/lib/glewlwyd/user"
client_module_path="/usr/lib/glewlwyd/client"
user_auth_scheme_module_path="/usr/lib/glewlwyd/scheme"
plugin_module_path="/usr/lib/glewlwyd/plugin"
use_secure_connection=true
secure_connection_key_file="{key}"
secure_connection_pem_file="{crt}"
hash_algorithm="SHA512"
database = {{ type = "sqlite3" path = "{db}" }};
""")
    proc = subprocess.Popen(["glewlwyd", f"--config-file={conf}"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=open(f"{d}/glewlwyd.err", "w"),
                            start_new_session=True)
    with open(os.path.join(d, "glewlwyd.pid"), "w") as f:
        f.write(str(proc.pid))
    base = f"https://{host}:{port}/api"
    admin = opener(crt)
    for _ in range(100):
        try:
            if call(admin, "POST", f"{base}/auth/",
                    {"username": ADMIN[0], "password": ADMIN[1]})[0] == 200:
                break
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None:
            sys.exit(f"oidc_provider: glewlwyd exited {proc.returncode}: "
                     + open(f"{d}/glewlwyd.err").read()[-500:])
        time.sleep(0.1)
    else:
        sys.exit("oidc_provider: glewlwyd does not answer")
    sign_key = os.path.join(d, "sign.key")
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", sign_key], check=True, timeout=60, capture_output=True)
    public = subprocess.run(["openssl", "pkey", "-in", sign_key, "-pubout"], check=True,
                            timeout=60, capture_output=True, text=True).stdout
    must(admin, "POST", f"{base}/mod/plugin/", {
        "module": "oidc", "name": "oidc", "display_name": "OpenID Connect", "enabled": True,
        "parameters": {
            "iss": f"{base}/oidc", "jwt-type": "rsa", "jwt-key-size": "256",
            "key": open(sign_key).read(), "cert": public,
            "access-token-duration": 3600, "refresh-token-duration": 86400, "code-duration": 600,
            "refresh-token-rolling": False, "allow-non-oidc": False,
            "auth-type-code-enabled": True, "auth-type-token-enabled": False,
            "auth-type-id-token-enabled": True, "auth-type-none-enabled": False,
            "auth-type-password-enabled": False, "auth-type-client-enabled": False,
            "auth-type-device-enabled": False, "auth-type-refresh-enabled": True,
            "subject-type": "public", "supported-scope": ["openid"],
            "name-claim": "no", "email-claim": "no", "scope-claim": "no",
            "address-claim": {"type": "no"},
            "claims": [{"name": "preferred_username", "user-property": "username",
                        "type": "string", "mandatory": True, "on-demand": False, "scope": []}],
            "session-management-allowed": True, "session-cookie-name": "GLEWLWYD_OIDC_SESSION",
            "session-cookie-expiration": 3600}})
    for name, password in users:
        must(admin, "POST", f"{base}/user/", {"username": name, "password": password,
                                              "name": name, "scope": ["openid"],
                                              "enabled": True})
    must(admin, "POST", f"{base}/client/", {
        "client_id": client_id, "name": "the Open OnDemand portal", "client_secret": secret,
        "confidential": True, "redirect_uri": [redirect], "authorization_type": ["code"],
        "token_endpoint_auth_method": ["client_secret_basic", "client_secret_post"],
        "scope": [], "enabled": True})
    # The schema's administrator password is public: nobody may use it from now on.
    must(admin, "PUT", f"{base}/user/{ADMIN[0]}", {"enabled": False, "scope": ["g_admin"]})
    print(f"glewlwyd {proc.pid}: issuer {base}/oidc")


def login(url, argv):
    name, password = sys.stdin.readline().rstrip("\n").split(":", 1)
    op = opener(arg(argv, "--cacert"))
    parts = urllib.parse.urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}/api"
    client = urllib.parse.parse_qs(parts.query).get("client_id", [""])[0]
    code, _, text = call(op, "POST", f"{base}/auth/", {"username": name, "password": password})
    if code != 200:
        sys.exit(f"the provider refused {name}'s password: HTTP {code} {text[:200]}")
    must(op, "PUT", f"{base}/auth/grant/{urllib.parse.quote(client)}", {"scope": "openid"})
    # The login page sends the browser back to the authorization request with g_continue.
    code, headers, text = call(op, "GET", url + "&g_continue")
    location = headers.get("Location", "")
    if code != 302 or not location:
        sys.exit(f"the authorization request answered HTTP {code} {location} {text[:200]}")
    print(location)


def stop(d):
    try:
        pid = int(open(os.path.join(d, "glewlwyd.pid")).read())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def main(argv):
    if len(argv) >= 2 and argv[0] == "start":
        start(argv[1], argv[2:])
    elif len(argv) >= 2 and argv[0] == "login":
        login(argv[1], argv[2:])
    elif len(argv) == 2 and argv[0] == "stop":
        stop(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
