// The portal's login on the real Debian Apache: a forked child enters private mount and
// network namespaces (only 127.0.0.1, a tmpfs copy of /etc, tmpfs over /run and Apache's
// state), creates local accounts with the real useradd and chpasswd, runs the role's own code
// (certificate, pwauth's PAM stack, the users file, a2enmod, the session key and Lua file,
// ood_portal.yml), builds the virtual host from ood_portal.yml with the stand-in of Open
// OnDemand's generator (tests/fakes/ood_portal_generator.h: ssl lines and
// custom_vhost_directives in the <VirtualHost *:443>, auth lines in the protected <Location>),
// starts apache2 and logs in with curl: the login form with its session (the default), and
// HTTP Basic (the opt-in), and OpenID Connect against a real provider (Debian's Glewlwyd, started
// in the namespace by oidc_provider.py). Nothing on the host is read for writing or changed.
// Root only.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/base64.h"
#include "common/clock.h"
#include "roles/ood/certificate.h"
#include "roles/ood/ood_yaml.h"
#include "roles/ood/portal_login.h"
#include "roles/ood/portal_web.h"
#include "roles/ood/settings.h"
#include "roles/os/files.h"
#include "roles/os/process.h"
#include "roles/os/systemd.h"
#include "roles/plan.h"
#include "roles/portal.h"
#include "roles/role.h"
#include "tests/fakes/block_devices.h"
#include "tests/fakes/http.h"
#include "tests/fakes/mounts.h"
#include "tests/fakes/ood_portal_generator.h"
#include "tests/integration/helpers.h"
#include "tests/integration/loop_devices.h"

namespace onehpc {
namespace {

// The login's PAM stack asks pam_faildelay for 2 s; Linux-PAM sleeps that time varied by up to
// +/- 50% (libpam/pam_delay.c, _pam_compute_delay): 1 s is the floor a failure always waits.
constexpr double kFailDelayFloor = 1.0;

using testing::ReadAll;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kServer[] = "127.0.0.1";
// Another address of the namespace's loopback: a stranger's, guessing passwords.
constexpr char kStranger[] = "127.0.0.2";
constexpr char kAlicePw[] = "Wonderland-42";
constexpr char kBobPw[] = "Builder-4242";
constexpr char kMalloryPw[] = "Mallory-4242";  // a local account that is not listed
constexpr char kMarker[] = "one-hpc portal test page";
constexpr int kProviderPort = 4593;
// Passwords at the provider: the users' local ones play no part in an OIDC login.
constexpr char kAliceIdpPw[] = "alice-at-the-provider-7";
constexpr char kMalloryIdpPw[] = "mallory-at-the-provider-7";
constexpr char kCaBundle[] = "/etc/ssl/certs/ca-certificates.crt";

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

Command Cmd60(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  c.timeout = Duration(60000);
  return c;
}

// Everything below runs in the child, in its own namespaces; each check appends a line
// "PASS what" or "FAIL what: detail" to `report`.
class Child {
 public:
  Child(std::string dir, ood::PortalLogin login, bool browser = false)
      : dir_(std::move(dir)), report_(dir_ + "/report"), login_(login), browser_(browser) {}

  int Run() {
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) return Bad("unshare"), 2;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return Bad("mount --make-rprivate /"), 2;
    }
    // A private /etc (a copy), and empty /run and Apache state: the host's stay untouched.
    for (const char* d : {"/etc", "/var/lib/apache2"}) {
      const std::string copy = dir_ + "/copy" + d;
      fs::create_directories(copy);
      if (::mount("tmpfs", copy.c_str(), "tmpfs", 0, "mode=0755") != 0 ||
          !Cmd({"cp", "-a", std::string(d) + "/.", copy}) ||
          ::mount(copy.c_str(), d, nullptr, MS_BIND, nullptr) != 0) {
        return Bad(std::string("private copy of ") + d), 2;
      }
    }
    for (const char* d :
         {"/run", "/var/log/apache2", "/var/lib/one-hpc", "/var/www", "/var/lib/fail2ban"}) {
      fs::create_directories(d);
      if (::mount("tmpfs", d, "tmpfs", 0, "mode=0755") != 0) {
        return Bad(std::string("tmpfs on ") + d), 2;
      }
    }
    fs::create_directories("/run/lock");  // /var/lock: apache2ctl's lock directory
    if (!Cmd({"ip", "link", "set", "lo", "up"})) return Bad("lo up"), 2;

    // Local accounts, as the portal role makes them (real useradd and chpasswd).
    for (const auto& [name, pw] : std::vector<std::pair<std::string, std::string>>{
             {"alice", kAlicePw}, {"bob", kBobPw}, {"mallory", kMalloryPw}, {"root", kBobPw}}) {
      if (name != "root" && !Cmd({"useradd", "-M", "-s", "/bin/bash", name})) {
        return Bad("useradd " + name), 2;
      }
      Command c;
      c.argv = {"chpasswd"};
      c.stdin_data = name + ":" + pw + "\n";
      if (!RunChecked(runner_, c)) return Bad("chpasswd " + name), 2;
    }

    if (auto s = RoleFiles(); !s) return Bad("the role's files: " + s.error().message), 2;
    if (auto s = BuildVirtualHost(); !s) return Bad("virtual host: " + s.error().message), 2;
    WriteFile("/var/www/ood-test/pun/sys/dashboard/index.html", std::string(kMarker) + "\n");
    if (login_.kind == ood::LoginKind::kOidc) Provider();

    auto t = runner_.Run(Cmd60({"apache2ctl", "-t"}));
    Check(t && t->exit_code == 0, "apache2ctl -t accepts the configuration",
          t ? t->err : t.error().message);
    auto start = runner_.Run(Cmd60({"apache2ctl", "start"}));
    if (!start || start->exit_code != 0) {
      Bad("apache2ctl start: " + (start ? start->err : start.error().message) +
          ReadAll("/var/log/apache2/error.log"));
      return 1;
    }
    const bool guarded = !browser_ && login_.kind != ood::LoginKind::kOidc;
    if (guarded) StartGuard();
    if (browser_) {
      BrowserChecks();
    } else if (login_.kind == ood::LoginKind::kBasic) {
      BasicChecks();
    } else if (login_.kind == ood::LoginKind::kOidc) {
      OidcChecks();
    } else {
      FormChecks();
    }
    runner_.Run(Cmd60({"apache2ctl", "stop"}));
    if (guarded) runner_.Run(Cmd60({"fail2ban-client", "stop"}));
    if (login_.kind == ood::LoginKind::kOidc) {
      runner_.Run(Cmd60({"python3", ProviderScript(), "stop", dir_ + "/idp"}));
    }
    return 0;
  }

 private:
  bool Cmd(std::vector<std::string> argv) {
    auto r = RunChecked(runner_, Cmd60(std::move(argv)));
    if (!r) Bad(r.error().message);
    return r.has_value();
  }
  void Append(const std::string& line) { std::ofstream(report_, std::ios::app) << line << "\n"; }
  void Bad(const std::string& what) { Append("FAIL " + what); }
  void Check(bool ok, const std::string& what, const std::string& detail = "") {
    Append((ok ? "PASS " : "FAIL ") + what + (ok || detail.empty() ? "" : ": " + detail));
  }

  // The portal role's code, on this (private) machine.
  Status RoleFiles() {
    LoadedContext context;
    context.vars = {{ood::kNfsHost, "127.0.0.1"}};
    auto settings = Settings::Resolve(MakePortalRole()->Settings(), context.vars);
    if (!settings) return onehpc::Fail(settings.error());
    Files files("");
    SystemctlSystemd systemd(runner_);
    fakes::FakeBlockDevices disks;
    fakes::FakeMounts mounts;
    RealClock clock;
    fakes::NoHttp http;
    Plan plan(PlanMode::kApply);
    SystemAdapters sys{runner_, files, systemd, disks, mounts, clock, http};
    RoleEnv env = RoleEnv::From(context, *settings, nullptr, sys, plan);
    if (auto s = ood::EnsurePortalCertificate(env, kServer, kServer, ood::kPortalStateDir); !s)
      return s;
    std::vector<ood::LocalUser> users = {ood::LocalUser{"alice", kAlicePw},
                                         ood::LocalUser{"bob", kBobPw}};
    if (auto s = ood::EnsurePortalLogin(env, users, login_); !s) return onehpc::Fail(s.error());
    return ood::WriteOodConfig(env, kServer, login_, {});
  }

  // What ood-portal-generator makes of ood_portal.yml (the stand-in of
  // tests/fakes/ood_portal_generator.h), bound to the namespace's loopback.
  Status BuildVirtualHost() {
    std::string vhost = fakes::OodLoginVirtualHost(
        YAML::LoadFile(std::string(ood::kOodConfigDir) + "/ood_portal.yml"), kServer,
        "/var/www/ood-test");
    WriteFile("/etc/apache2/sites-available/ood-portal.conf", vhost);
    fs::remove("/etc/apache2/sites-enabled/000-default.conf");
    std::error_code ec;
    fs::create_symlink("../sites-available/ood-portal.conf",
                       "/etc/apache2/sites-enabled/ood-portal.conf", ec);
    // Open OnDemand's portal listens on 443 only; here on the namespace's loopback.
    WriteFile("/etc/apache2/ports.conf", fmt::format("Listen {}:443 https\n", kServer));
    if (ec) return onehpc::Fail(ErrorKind::kIo, ec.message());
    return Ok();
  }

  struct Answer {
    int curl_exit = -1;
    std::string code;
    std::string body;
    double seconds = 0;
  };
  // curl with the role's certificate as the only trust anchor; the credentials go in a
  // config on stdin (never on the command line).
  Answer Get(const std::string& user, const std::string& password) {
    Command c;
    c.argv = {"curl",
              "-sS",
              "--max-time",
              "30",
              "--cacert",
              fmt::format("{}/{}.crt", ood::kOodSslDir, kServer),
              "-o",
              dir_ + "/body",
              "-w",
              "%{http_code}",
              "-K",
              "-",
              fmt::format("https://{}/pun/sys/dashboard/", kServer)};
    if (!from_.empty()) c.argv.insert(c.argv.begin() + 1, {"--interface", from_});
    if (!user.empty()) c.stdin_data = fmt::format("user = \"{}:{}\"\n", user, password);
    c.timeout = Duration(40000);
    auto t0 = std::chrono::steady_clock::now();
    auto r = runner_.Run(c);
    Answer a;
    a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return a;
    a.curl_exit = r->exit_code;
    a.code = r->out;
    a.body = ReadAll(dir_ + "/body");
    fs::remove(dir_ + "/body");
    return a;
  }

  void BasicChecks() {
    CurlTransport curl;
    auto probe = ood::ProbePortal(curl, kServer, ood::PortalLogin{ood::LoginKind::kBasic});
    Check(probe.has_value(),
          "the role's READY probe (libcurl, the role's certificate alone) finds the Basic login",
          probe ? "" : probe.error().message);
    auto anon = Get("", "");
    Check(anon.curl_exit == 0 && anon.code == "401",
          "HTTPS answers with the role's certificate (curl trusts only it); no credentials: 401",
          fmt::format("curl exit {}, HTTP {}", anon.curl_exit, anon.code));
    auto alice = Get("alice", kAlicePw);
    Check(alice.code == "200" && alice.body.find(kMarker) != std::string::npos,
          "a listed user's right password reaches the protected location",
          "HTTP " + alice.code + ReadAll("/var/log/apache2/error.log"));
    auto wrong = Get("alice", "Not-her-password");
    Check(wrong.code == "401", "a wrong password gets 401", "HTTP " + wrong.code);
    Check(wrong.seconds >= kFailDelayFloor, "a wrong password is slowed (>= 1 s)",
          fmt::format("{:.2f} s", wrong.seconds));
    auto mallory = Get("mallory", kMalloryPw);
    Check(mallory.code == "401", "an unlisted local account is refused with its right password",
          "HTTP " + mallory.code);
    Check(mallory.seconds >= kFailDelayFloor,
          "an unlisted name waits as a wrong password does (>= 1 s: no user enumeration)",
          fmt::format("{:.2f} s", mallory.seconds));
    auto root = Get("root", kBobPw);
    Check(root.code == "401", "root is refused with its right password", "HTTP " + root.code);
    GuessingChecks([this](const std::string& pw) {
      auto a = Get("bob", pw);
      return Attempt{a.curl_exit == 0, a.code == "200",
                     fmt::format("curl exit {}, HTTP {}", a.curl_exit, a.code)};
    });
  }

  // ---- guessing: fail2ban (the role's jail, Debian's apache-auth filter, nftables), for real
  // in this network namespace

  struct Attempt {
    bool reached = false;   ///< the server answered
    bool admitted = false;  ///< the login succeeded
    std::string detail;
  };
  void StartGuard() {
    fs::create_directories("/run/fail2ban");
    auto r = runner_.Run(Cmd60({"fail2ban-client", "-x", "-b", "start"}));
    Check(r && r->exit_code == 0,
          "fail2ban starts with the role's jail (Debian's sshd jail off) on Apache's error log",
          r ? r->out + r->err : r.error().message);
  }
  std::string JailStatus() {
    auto r = runner_.Run(Cmd60({"fail2ban-client", "status", ood::kLoginJail}));
    return r ? r->out + r->err : r.error().message;
  }
  bool Banned(const std::string& address) {
    const std::string status = JailStatus();
    const auto at = status.find("Banned IP list:");
    return at != std::string::npos && status.find(address, at) != std::string::npos;
  }
  // Review N8: a stranger at kStranger guesses bob's password kLoginMaxRetry times and is
  // refused on 443 (even with the right password); bob, from kServer, is not locked out.
  template <typename TryBob>
  void GuessingChecks(TryBob try_bob) {
    from_ = kStranger;
    for (int i = 0; i < ood::kLoginMaxRetry; ++i) try_bob("guess-" + std::to_string(i));
    bool banned = false;
    for (int i = 0; i < 40 && !(banned = Banned(kStranger)); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    Check(banned,
          fmt::format("fail2ban bans {} after {} wrong passwords for bob from it", kStranger,
                      ood::kLoginMaxRetry),
          JailStatus() + ReadAll("/var/log/apache2/error.log"));
    auto refused = try_bob(kBobPw);
    Check(!refused.reached, "that address is refused on 443, even with bob's right password",
          refused.detail);
    from_.clear();
    auto bob = try_bob(kBobPw);
    Check(bob.admitted, "bob is not locked out: his right password from 127.0.0.1 gets him in",
          bob.detail);
    Cmd({"fail2ban-client", "set", ood::kLoginJail, "unbanip", kStranger});
    from_ = kStranger;
    auto again = try_bob(kBobPw);
    Check(again.admitted, "fail2ban-client ... unbanip lets that address in again", again.detail);
    from_.clear();
  }

  // ---- the login form and its session

  // One request with the cookie jar; `form` (name=value lines) goes in a curl config on stdin
  // (never on the command line). The answer's code, its Location and its headers.
  struct Reply {
    std::string code;
    std::string location;
    std::string headers;
    std::string body;
    double seconds = 0;
  };
  Reply Request(const std::string& path, const std::vector<std::string>& form = {},
                bool jar = true) {
    Command c;
    c.argv = {"curl",       "-sS",
              "--max-time", "30",
              "--cacert",   fmt::format("{}/{}.crt", ood::kOodSslDir, kServer),
              "-o",         dir_ + "/body",
              "-D",         dir_ + "/headers",
              "-w",         "%{http_code} %{redirect_url}",
              "-K",         "-"};
    if (jar) {
      c.argv.insert(c.argv.end(), {"-b", dir_ + "/jar", "-c", dir_ + "/jar"});
    }
    if (!from_.empty()) c.argv.insert(c.argv.end(), {"--interface", from_});
    c.argv.push_back(fmt::format("https://{}{}", kServer, path));
    for (const auto& f : form) c.stdin_data += fmt::format("data-urlencode = \"{}\"\n", f);
    c.timeout = Duration(40000);
    auto t0 = std::chrono::steady_clock::now();
    auto r = runner_.Run(c);
    Reply a;
    a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r) {
      std::istringstream out(r->out);
      out >> a.code >> a.location;
    }
    a.headers = ReadAll(dir_ + "/headers");
    a.body = ReadAll(dir_ + "/body");
    fs::remove(dir_ + "/body");
    fs::remove(dir_ + "/headers");
    return a;
  }
  Reply LogIn(const std::string& user, const std::string& password) {
    return Request(ood::kLoginCheck, {"httpd_username=" + user, "httpd_password=" + password});
  }
  static bool RedirectsTo(const Reply& r, const std::string& path) {
    return r.code.size() == 3 && r.code[0] == '3' &&
           r.location == fmt::format("https://{}{}", kServer, path);
  }
  std::string Jar() { return ReadAll(dir_ + "/jar"); }
  // The session cookie's value in the jar ("" = none).
  std::string CookieValue() {
    std::istringstream in(Jar());
    std::string line;
    std::string value;
    while (std::getline(in, line)) {
      if (line.find(std::string("\t") + ood::kSessionCookie + "\t") == std::string::npos) continue;
      value = line.substr(line.rfind('\t') + 1);
    }
    return value;
  }
  // No session in the jar: the dashboard sends to the login page.
  bool NoSession() { return RedirectsTo(Request("/pun/sys/dashboard/"), ood::kLoginPage); }
  static std::string Show(const Reply& r) {
    return fmt::format("HTTP {} -> '{}' in {:.2f} s", r.code, r.location, r.seconds);
  }

  // The site's OpenID Connect provider: Debian's Glewlwyd, set up by oidc_provider.py on the
  // namespace's loopback with the portal's certificate, which the private /etc's CA bundle
  // trusts, as a site's provider is trusted through Debian's CA bundle.
  void Provider() {
    const std::string crt = fmt::format("{}/{}.crt", ood::kOodSslDir, kServer);
    std::ofstream(kCaBundle, std::ios::app) << ReadAll(crt);
    Command c = Cmd60({"python3", ProviderScript(), "start", dir_ + "/idp", "--issuer-host",
                       kServer, "--port", std::to_string(kProviderPort), "--cert", crt, "--key",
                       fmt::format("{}/{}.key", ood::kOodSslDir, kServer), "--client",
                       fmt::format("{}:{}:https://{}/oidc", login_.oidc.client_id,
                                   login_.oidc.client_secret, kServer)});
    c.stdin_data = fmt::format("alice:{}\nmallory:{}\n", kAliceIdpPw, kMalloryIdpPw);
    auto r = runner_.Run(c);
    Check(r && r->exit_code == 0, "Glewlwyd answers as the site's OpenID Connect provider",
          r ? r->out + r->err : r.error().message);
  }
  static std::string ProviderScript() {
    return (fs::path(__FILE__).parent_path() / "oidc_provider.py").string();
  }

  struct Raw {
    std::string code, headers, body;
  };
  Raw GetRaw(const std::string& path) {
    Command c;
    c.argv = {"curl",
              "-sS",
              "--max-time",
              "30",
              "--cacert",
              fmt::format("{}/{}.crt", ood::kOodSslDir, kServer),
              "-D",
              dir_ + "/headers",
              "-o",
              dir_ + "/body",
              "-w",
              "%{http_code}",
              fmt::format("https://{}{}", kServer, path)};
    c.timeout = Duration(40000);
    Raw raw;
    auto r = runner_.Run(c);
    if (r) raw.code = r->out;
    raw.headers = ReadAll(dir_ + "/headers");
    raw.body = ReadAll(dir_ + "/body");
    return raw;
  }
  static std::string Header(const std::string& headers, const std::string& name) {
    std::istringstream in(headers);
    std::string found;
    for (std::string line; std::getline(in, line);) {
      if (line.size() > name.size() && strncasecmp(line.c_str(), name.c_str(), name.size()) == 0 &&
          line[name.size()] == ':') {
        found += line.substr(name.size() + 1) + "\n";
      }
    }
    return found;
  }

  // OIDC: mod_auth_openidc, configured from ood_portal.yml's oidc_* keys, reads the provider's
  // discovery document and sends a browser without a session to the provider.
  void OidcChecks() {
    CurlTransport curl;
    auto probe = ood::ProbePortal(curl, kServer, login_);
    Check(probe.has_value(),
          "the role's READY probe finds the dashboard's redirect to the OpenID Connect provider",
          probe ? "" : probe.error().message + ReadAll("/var/log/apache2/error.log"));
    auto anon = GetRaw("/pun/sys/dashboard/");
    const std::string location = Header(anon.headers, "Location");
    const std::string authorize =
        fmt::format(" https://{}:{}/api/oidc/auth?", kServer, kProviderPort);
    bool params = location.rfind(authorize, 0) == 0;
    for (const char* p : {"response_type=code", "scope=openid%20profile%20email",
                          "client_id=ood-portal", "redirect_uri=https%3A%2F%2F127.0.0.1%2Foidc"}) {
      params = params && location.find(p) != std::string::npos;
    }
    Check(anon.code == "302" && params,
          "no session: the dashboard sends the browser to the provider's authorization endpoint "
          "(code flow, the portal's client id, its redirect URI /oidc, scope openid profile email)",
          "HTTP " + anon.code + " Location:" + location + ReadAll("/var/log/apache2/error.log"));
    const std::string state = Header(anon.headers, "Set-Cookie");
    Check(state.find("mod_auth_openidc_state_") != std::string::npos &&
              state.find("Secure") != std::string::npos &&
              state.find("HttpOnly") != std::string::npos,
          "the login's state cookie is Secure and HttpOnly", state);
    auto out = GetRaw("/logout");
    Check(out.code == "302" &&
              Header(out.headers, "Location").find("/oidc?logout=https%3A%2F%2F127.0.0.1%2F") !=
                  std::string::npos,
          "the dashboard's /logout goes to mod_auth_openidc's logout, back to the portal",
          "HTTP " + out.code + " Location:" + Header(out.headers, "Location"));
    auto back = GetRaw("/oidc?logout=https%3A%2F%2F127.0.0.1%2F");
    Check(back.code == "302" &&
              Header(back.headers, "Location").find("https://127.0.0.1/") != std::string::npos,
          "mod_auth_openidc's logout ends on the portal's front page",
          "HTTP " + back.code + " Location:" + Header(back.headers, "Location"));
    auto away = GetRaw("/oidc?logout=https%3A%2F%2Fevil.example.net%2F");
    // mod_auth_openidc answers with its error page (HTTP 200 in Debian 12's 2.4.12).
    Check(Header(away.headers, "Location").empty() &&
              away.body.find("Error") != std::string::npos &&
              away.body.find("evil.example.net") != std::string::npos,
          "a logout that would send the browser off the portal is refused (no redirect, "
          "mod_auth_openidc's error page)",
          "HTTP " + away.code + " Location:" + Header(away.headers, "Location") + away.body);
    OidcLoginChecks();
  }

  // A person logs in at the provider (oidc_provider.py makes the calls of Glewlwyd's login
  // page) after the dashboard sent the browser there; the portal's answer to the provider's
  // redirect back (the code at /oidc), or an empty code when the provider did not send one.
  Reply ProviderLogin(const std::string& user, const std::string& password) {
    auto to_provider = Request("/pun/sys/dashboard/");
    Command c = Cmd60({"python3", ProviderScript(), "login", to_provider.location, "--cacert",
                       fmt::format("{}/{}.crt", ood::kOodSslDir, kServer)});
    c.stdin_data = user + ":" + password + "\n";
    auto r = runner_.Run(c);
    const std::string portal = fmt::format("https://{}", kServer);
    std::string back = r ? r->out.substr(0, r->out.find('\n')) : "";
    if (!r || r->exit_code != 0 || back.rfind(portal + "/oidc?", 0) != 0) {
      Reply none;
      none.body = r ? r->out + r->err : r.error().message;
      return none;
    }
    return Request(back.substr(portal.size()));
  }

  // The login through the real provider: the code exchanged by mod_auth_openidc, the ID
  // token's preferred_username checked against the list (Require claim), the logout.
  void OidcLoginChecks() {
    const std::string dashboard = "/pun/sys/dashboard/";
    fs::remove(dir_ + "/jar");
    auto back = ProviderLogin("alice", kAliceIdpPw);
    Check(RedirectsTo(back, dashboard) &&
              back.headers.find("mod_auth_openidc_session=") != std::string::npos &&
              back.headers.find("Secure") != std::string::npos &&
              back.headers.find("HttpOnly") != std::string::npos,
          "alice, listed, logs in at the provider: the portal exchanges the code and gives a "
          "Secure, HttpOnly session cookie, back to the dashboard",
          Show(back) + back.headers + back.body + ReadAll("/var/log/apache2/error.log"));
    auto dash = Request(dashboard);
    Check(dash.code == "200" && dash.body.find(kMarker) != std::string::npos,
          "with that session the dashboard answers (the ID token's preferred_username is alice)",
          Show(dash) + ReadAll("/var/log/apache2/error.log"));
    auto out = Request("/logout");
    auto end = out.location.empty()
                   ? Reply{}
                   : Request(out.location.substr(fmt::format("https://{}", kServer).size()));
    auto after = Request(dashboard);
    Check(end.location.rfind(
              fmt::format("https://{}:{}/api/oidc/end_session?", kServer, kProviderPort), 0) == 0 &&
              after.location.rfind(
                  fmt::format("https://{}:{}/api/oidc/auth?", kServer, kProviderPort), 0) == 0,
          "the logout ends the portal's session and goes on to the provider's end_session "
          "endpoint; the dashboard then sends to the provider again",
          Show(out) + " / " + Show(end) + " / " + Show(after));
    fs::remove(dir_ + "/jar");
    auto refused = ProviderLogin("mallory", kMalloryIdpPw);
    auto tried = Request(dashboard);
    Check(!refused.code.empty() && refused.body.find(kMarker) == std::string::npos &&
              (tried.code == "401" || tried.code == "403") &&
              tried.body.find(kMarker) == std::string::npos,
          "mallory, known to the provider but not listed, is refused by the portal after the "
          "provider's login (Require claim)",
          Show(refused) + " / " + Show(tried) + refused.body);
  }

  void FormChecks() {
    const std::string dashboard = "/pun/sys/dashboard/";
    const std::string login = ood::kLoginPage;
    struct stat st {};
    Check(::stat(ood::kSessionKeyFile, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_uid == 0,
          "the session key is root's, mode 0600, and Apache started with it");

    CurlTransport curl;
    auto probe = ood::ProbePortal(curl, kServer, ood::PortalLogin{ood::LoginKind::kForm});
    Check(probe.has_value(),
          "the role's READY probe (libcurl, the role's certificate alone) finds the login form",
          probe ? "" : probe.error().message);

    auto anon = Request(dashboard);
    Check(RedirectsTo(anon, login),
          "HTTPS with the role's certificate; no session: the dashboard sends to the login page",
          Show(anon));
    auto page = Request(login);
    Check(page.code == "200" && page.body.find("name=\"httpd_password\"") != std::string::npos &&
              page.body.find(ood::kLoginCheck) != std::string::npos &&
              page.headers.find("Cache-Control: no-store") != std::string::npos,
          "the login page is a form posting to the login check, never cached", Show(page));

    auto wrong = LogIn("alice", "Not-her-password");
    Check(RedirectsTo(wrong, login + "?failed") && NoSession(),
          "a wrong password: back to the login page (?failed), no session", Show(wrong));
    Check(wrong.seconds >= kFailDelayFloor, "a wrong password is slowed (>= 1 s)", Show(wrong));

    fs::remove(dir_ + "/jar");
    auto in = LogIn("alice", kAlicePw);
    const std::string cookie = CookieValue();
    Check(RedirectsTo(in, ood::kLoginStamp) && !cookie.empty(),
          "a listed user's right password: a session cookie, then the login stamp", Show(in));
    Check(in.headers.find("Secure") != std::string::npos &&
              in.headers.find("HttpOnly") != std::string::npos &&
              in.headers.find("SameSite=Lax") != std::string::npos,
          "the session cookie is Secure, HttpOnly, SameSite=Lax", in.headers);
    Check(cookie.find("alice") == std::string::npos && cookie.find(kAlicePw) == std::string::npos &&
              cookie.size() > 60,
          "the cookie is encrypted: neither the name nor the password shows", cookie);
    auto stamp = Request(ood::kLoginStamp);
    Check(stamp.code == "200", "the login stamp answers", Show(stamp));
    auto dash = Request(dashboard);
    Check(dash.code == "200" && dash.body.find(kMarker) != std::string::npos,
          "with the session the dashboard answers, without the password being sent again",
          Show(dash) + ReadAll("/var/log/apache2/error.log"));
    Check(dash.headers.find("Path=/pun") == std::string::npos,
          "Open OnDemand's cookie-path rewrite in /pun leaves the session cookie at path /",
          dash.headers);

    // An altered cookie is no session (one character changed, at 8 places).
    const std::string saved = Jar();
    const std::string current = CookieValue();  // re-encrypted at each request
    const size_t at = current.empty() ? std::string::npos : saved.rfind(current);
    int accepted = 0;
    for (size_t i = 1; i <= 8 && at != std::string::npos; ++i) {
      std::string forged = saved;
      char& c = forged[at + i * (current.size() - 1) / 9];
      c = c == 'A' ? 'B' : 'A';
      WriteFile(dir_ + "/jar", forged);
      if (Request(dashboard).code == "200") ++accepted;
    }
    WriteFile(dir_ + "/jar", saved);
    Check(at != std::string::npos && accepted == 0,
          "a session cookie altered in any of 8 places is refused",
          fmt::format("{} of 8 accepted", accepted));

    // The login time is given once: the stamp called again later renews nothing.
    auto login_cookie = [this] {
      std::istringstream jar(Jar());
      std::string line;
      std::string value;
      while (std::getline(jar, line)) {
        if (line.find(std::string("\t") + ood::kLoginCookie + "\t") != std::string::npos) {
          value = line.substr(line.rfind('\t') + 1);
        }
      }
      return value;
    };
    const std::string first = login_cookie();
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    auto restamp = Request(ood::kLoginStamp);
    Check(!first.empty() && restamp.code == "200" && login_cookie() == first,
          "the login stamp called again later keeps the login time",
          first + " / " + login_cookie());

    // Logout: the dashboard's /logout ends the session.
    auto out = Request("/logout");
    Check(RedirectsTo(out, ood::kLogoutLocation), "/logout goes to the portal's logout", Show(out));
    auto bye = Request(ood::kLogoutLocation);
    Check(RedirectsTo(bye, login + "?out"), "the logout ends the session and says so", Show(bye));
    auto after = Request(dashboard);
    Check(RedirectsTo(after, login), "after the logout the dashboard sends to the login page",
          Show(after));

    // Refused: an unlisted account, root; guessing gets the address refused, not bob.
    fs::remove(dir_ + "/jar");
    auto mallory = LogIn("mallory", kMalloryPw);
    Check(RedirectsTo(mallory, login + "?failed") && NoSession(),
          "an unlisted local account is refused with its right password", Show(mallory));
    Check(mallory.seconds >= kFailDelayFloor,
          "an unlisted name waits as a wrong password does (>= 1 s: no user enumeration)",
          Show(mallory));
    auto root = LogIn("root", kBobPw);
    Check(RedirectsTo(root, login + "?failed") && NoSession(),
          "root is refused with its right password", Show(root));
    GuessingChecks([this](const std::string& pw) {
      fs::remove(dir_ + "/jar");
      auto r = LogIn("bob", pw);
      return Attempt{!r.code.empty() && r.code != "000", RedirectsTo(r, ood::kLoginStamp), Show(r)};
    });

    // The idle limit: no request for longer than it ends the session.
    Request(ood::kLoginStamp);
    std::this_thread::sleep_for(std::chrono::seconds(login_.idle_seconds + 2));
    auto idle = Request(dashboard);
    Check(
        RedirectsTo(idle, login),
        fmt::format("after {} s without a request the session has ended", login_.idle_seconds + 2),
        Show(idle));

    // The lifetime: a request every second keeps the session from idling; the login time
    // ends it all the same (os.time() counts whole seconds: not before lifetime - 1 s).
    fs::remove(dir_ + "/jar");
    const auto t0 = std::chrono::steady_clock::now();
    LogIn("alice", kAlicePw);
    Request(ood::kLoginStamp);
    Reply end;
    double ended = -1;
    int answered = 0;
    while (std::chrono::steady_clock::now() - t0 <
           std::chrono::seconds(login_.lifetime_seconds + 3)) {
      end = Request(dashboard);
      if (end.code != "200") {
        ended = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        break;
      }
      ++answered;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    Check(RedirectsTo(end, ood::kExpiredLocation) && ended >= login_.lifetime_seconds - 1,
          fmt::format("an active session (a request a second) is ended {} s after the login, "
                      "not before",
                      login_.lifetime_seconds),
          fmt::format("{} requests answered, then {} at {:.1f} s", answered, Show(end), ended));
    auto again = Request(ood::kExpiredLocation);
    auto gone = Request(dashboard);
    Check(RedirectsTo(again, login + "?expired") && RedirectsTo(gone, login),
          "the login page says the session ended, and the session is gone",
          Show(again) + " / " + Show(gone));
  }

  // ---- the login form in a real browser (tests/integration/portal_browser.py)

  // The SHA-256 of the certificate's public key, base64: Chromium trusts that key alone.
  std::string CertificatePin() {
    const std::string crt = fmt::format("{}/{}.crt", ood::kOodSslDir, kServer);
    auto pub = runner_.Run(Cmd60({"openssl", "x509", "-in", crt, "-pubkey", "-noout"}));
    if (!pub || pub->exit_code != 0) return "";
    Command der = Cmd60({"openssl", "pkey", "-pubin", "-outform", "der"});
    der.stdin_data = pub->out;
    auto d = runner_.Run(der);
    if (!d || d->exit_code != 0) return "";
    Command hash = Cmd60({"openssl", "dgst", "-sha256", "-binary"});
    hash.stdin_data = d->out;
    auto h = runner_.Run(hash);
    if (!h || h->exit_code != 0 || h->out.size() != 32) return "";
    return Base64Encode(h->out);
  }

  void BrowserChecks() {
    const std::string pin = CertificatePin();
    Check(!pin.empty(), "the certificate's public-key pin for Chromium");
    Command c;
    c.argv = {"python3",
              (fs::path(__FILE__).parent_path() / "portal_browser.py").string(),
              fmt::format("https://{}", kServer),
              "alice",
              pin,
              ArtifactsDir(),
              kMarker};
    c.stdin_data = std::string(kAlicePw) + "\n";
    c.timeout = Duration(180000);
    auto r = runner_.Run(c);
    if (!r) {
      Bad("portal_browser.py: " + r.error().message);
      return;
    }
    std::istringstream out(r->out);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("PASS ", 0) == 0 || line.rfind("FAIL ", 0) == 0) Append(line);
    }
    if (r->exit_code != 0) Bad(fmt::format("portal_browser.py exit {}: {}", r->exit_code, r->err));
  }

 public:
  // Where the browser's screenshots are kept: $ONEHPC_ARTIFACTS_DIR/portal-browser, else
  // ./artifacts/portal-browser (the test's directory in the build tree).
  static std::string ArtifactsDir() {
    const char* dir = std::getenv("ONEHPC_ARTIFACTS_DIR");
    return (dir != nullptr && *dir != '\0' ? std::string(dir)
                                           : fs::current_path().string() + "/artifacts") +
           "/portal-browser";
  }

 private:
  std::string dir_;
  std::string from_;  ///< curl's source address ("" = the default, kServer)
  std::string report_;
  ood::PortalLogin login_;
  bool browser_ = false;
  RealProcessRunner runner_;
};

class PortalApacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "namespaces and accounts need root";
    for (const char* p : {"apache2ctl", "a2enmod", "curl", "useradd", "fail2ban-client", "nft"}) {
      if (!testing::HaveProgram(p)) GTEST_SKIP() << p << " missing";
    }
    for (const char* f : {"/usr/sbin/pwauth", "/usr/lib/apache2/modules/mod_authnz_external.so"}) {
      if (!fs::exists(f)) GTEST_SKIP() << f << " missing (pwauth, libapache2-mod-authnz-external)";
    }
    char tmpl[] = "/tmp/onehpc-apache.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

// Runs the child with `login` and checks that it made `expected` checks, all passed.
void RunChild(const std::string& dir, const ood::PortalLogin& login, size_t expected,
              bool browser = false) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(Child(dir, login, browser).Run());
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string report = ReadAll(dir + "/report");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << report;
  EXPECT_THAT(report, Not(HasSubstr("FAIL"))) << report;
  size_t passes = 0;
  for (size_t at = report.find("PASS "); at != std::string::npos;
       at = report.find("PASS ", at + 1)) {
    ++passes;
  }
  EXPECT_EQ(passes, expected) << report;
  std::cout << report;
}

TEST_F(PortalApacheTest, TheLoginFormKeepsAnEncryptedSessionThatIdlesExpiresAndLogsOut) {
  ood::PortalLogin login;  // the default, with limits a test can wait for
  login.idle_seconds = 4;
  login.lifetime_seconds = 10;
  RunChild(dir_, login, 29);
}

// The login as a person meets it: Debian's Chromium opens the portal, fills the form, lands
// on the page behind it and logs out; a screenshot of each step is kept (Child::ArtifactsDir).
TEST_F(PortalApacheTest, AUserLogsInAndOutWithARealBrowser) {
  for (const char* p : {"chromium", "chromedriver", "python3", "openssl"}) {
    if (!testing::HaveProgram(p)) GTEST_SKIP() << p << " missing (make deps installs it)";
  }
  RunChild(dir_, ood::PortalLogin{}, 7, true);
  std::cout << "screenshots: " << Child::ArtifactsDir() << "\n";
}

// The site's OpenID Connect provider is a real one, Debian's Glewlwyd: the virtual host Open
// OnDemand's generator writes from one-hpc's oidc_* keys (its stand-in) on the real
// mod_auth_openidc, the redirect to the provider, a listed identity logged in through the
// code flow and the ID token's claim, the logout at the portal and the provider, an identity
// the list does not name refused.
TEST_F(PortalApacheTest, OidcLogsAListedIdentityInThroughARealProviderAndRefusesOthers) {
  if (!fs::exists("/usr/lib/apache2/modules/mod_auth_openidc.so")) {
    GTEST_SKIP() << "mod_auth_openidc missing (libapache2-mod-auth-openidc; make deps installs it)";
  }
  for (const char* p : {"glewlwyd", "python3", "openssl"}) {
    if (!testing::HaveProgram(p)) GTEST_SKIP() << p << " missing (make deps installs glewlwyd)";
  }
  ood::PortalLogin login;
  login.kind = ood::LoginKind::kOidc;
  login.admitted = {"alice", "bob"};
  login.oidc.issuer = fmt::format("https://{}:{}/api/oidc", kServer, kProviderPort);
  login.oidc.client_id = "ood-portal";
  login.oidc.client_secret = "s3cret-of-the-portal";
  login.oidc.logout_url = fmt::format("https://{}/", kServer);
  RunChild(dir_, login, 12);
}

TEST_F(PortalApacheTest, BasicOptInListedUsersLogInOthersAreRefusedAndGuessersAreBanned) {
  RunChild(dir_, ood::PortalLogin{ood::LoginKind::kBasic}, 14);
}

}  // namespace
}  // namespace onehpc
