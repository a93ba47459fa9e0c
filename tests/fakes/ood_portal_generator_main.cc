// update-ood-portal-standin: a stand-in for Open OnDemand's `update_ood_portal` (OSC's
// ood-portal-generator, from OSC's repository, unreachable here), packaged by
// tests/fakes/ondemand_repo.sh as /opt/ood/ood-portal-generator/sbin/update_ood_portal in the
// stand-in `ondemand` package that the VM lab installs through the image build's own path.
//
// What it keeps of the real program (checked against
// ood-portal-generator/lib/ood_portal_generator/application.rb in OSC/ondemand): it reads
// /etc/ood/config/ood_portal.yml (-c CONFIG), renders the virtual host
// (tests/fakes/ood_portal_generator.h), and compares it with the installed one,
// /etc/apache2/sites-available/ood-portal.conf on Debian. Identical: "No change", exit 0.
// Different, and the installed file missing or still matching the checksum kept in
// /etc/ood/config/ood_portal.sha256sum (its lines that are not comments): the old file moved
// aside with a time stamp, the new one written (0640) and its checksum saved, exit 3 with
// --detailed-exitcodes. Different, and the installed file edited since (its checksum no longer
// the saved one) without --force: the new one written to ood-portal.conf.new, the installed
// one left, exit 4 with --detailed-exitcodes. Without --detailed-exitcodes both are 0. A
// failure prints the reason and "Run 'update_ood_portal --help'..." and exits 1. APACHE and
// SUM in the environment move the two files, as they do for the real program.
// What it leaves out: Dex, the ERB templates (the virtual host is the login's, serving a
// static page from /opt/ood/one-hpc-stand-in for the dashboard), the chown to Apache's group.
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/fakes/ood_portal_generator.h"

namespace {

constexpr char kDocroot[] = "/opt/ood/one-hpc-stand-in";

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

bool Read(const std::string& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  text = s.str();
  return true;
}

void Write(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  ::chmod(tmp.c_str(), mode);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

// SHA-256 (hex) of the text without its comment lines, as the real program sums.
std::string Sum(const std::string& text) {
  std::string kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') continue;
    kept += line + "\n";
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(kept.data(), kept.size(), md, &n, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

int Update(const std::string& config, bool detailed, bool force) {
  const std::string apache = Env("APACHE", "/etc/apache2/sites-available/ood-portal.conf");
  const std::string sum_path = Env("SUM", "/etc/ood/config/ood_portal.sha256sum");
  std::string yaml;
  if (!Read(config, yaml)) yaml = "{}";
  const std::string fresh = onehpc::fakes::OodLoginVirtualHost(YAML::Load(yaml), "*", kDocroot);
  std::string installed;
  const bool exists = Read(apache, installed);
  std::string saved;
  const bool has_sum = Read(sum_path, saved) && !saved.empty();
  if (!has_sum) {
    std::cout << "Generating Apache config checksum file: '" << sum_path << "'\n";
    Write(sum_path, Sum(fresh) + " " + apache + "\n", 0644);
    saved = Sum(fresh);
  }
  if (exists && installed == fresh) {
    std::cout << "No change in Apache config.\n";
    return 0;
  }
  const bool replace = force || !exists || saved.substr(0, saved.find(' ')) == Sum(installed);
  if (!replace) {
    std::cout << "WARNING: Checksum of " << apache << " does not match previous value, "
              << "not replacing.\nGenerating new Apache config at: '" << apache << ".new'\n";
    Write(apache + ".new", fresh, 0640);
    return detailed ? 4 : 0;
  }
  if (exists) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", std::localtime(&now));
    const std::string bak = apache + "." + stamp;
    std::cout << "Backing up previous Apache config to: '" << bak << "'\n";
    std::rename(apache.c_str(), bak.c_str());
  }
  std::cout << "Generating new Apache config at: '" << apache << "'\n";
  Write(apache, fresh, 0640);
  Write(sum_path, Sum(fresh) + " " + apache + "\n", 0644);
  std::cout << "Completed successfully!\n";
  return detailed ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool detailed = false;
  bool force = false;
  std::string config = Env("CONFIG", "/etc/ood/config/ood_portal.yml");
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--detailed-exitcodes") {
        detailed = true;
      } else if (a == "-f" || a == "--force") {
        force = true;
      } else if ((a == "-c" || a == "--config") && i + 1 < argc) {
        config = argv[++i];
      } else if (a == "-h" || a == "--help") {
        std::cout << "Usage: update_ood_portal [options] (one-hpc's stand-in)\n"
                     "  -f, --force  --detailed-exitcodes  -c, --config CONFIG\n";
        return 0;
      } else {
        throw std::invalid_argument("invalid option: " + a);
      }
    }
    return Update(config, detailed, force);
  } catch (const std::exception& e) {
    std::cerr << "StandardError:" << e.what() << "\n"
              << "Run 'update_ood_portal --help' to see a full list of available options.\n";
    return 1;
  }
}
