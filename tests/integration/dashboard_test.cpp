// The head's dashboard, seen from outside. A real head with three workers runs a job;
// a real headless Chromium (Debian's chromium) opens the cluster page and the job page while it
// trains, finds every node and a batch chart with points, and saves a screenshot; Prometheus's
// promtool checks /metrics; the JSON API says what `omnilearn status --json` and events.jsonl
// say; `omnilearn report` writes a report that a browser with every network request sent to a
// counting trap draws completely without one; `run` writes the same report with its PNGs, and
// kills a browser that hangs. A dashboard on another address than 127.0.0.1 refuses every
// request without the cluster's token, the browser's included: on a second loopback address,
// and on a veth interface in network namespaces the test makes, asked across the link.
//
// Tests that need chromium or promtool skip (saying which package) where they are missing;
// scripts/test.sh installs both (scripts/install-deps.sh --test). The namespace test skips,
// with the reason, where namespaces cannot be made (root and iproute2 needed).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "tests/support/job_run.hpp"
#include "tests/support/netns.hpp"

namespace omnilearn::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Json = nlohmann::json;

const char* kChromium = "/usr/bin/chromium";
const char* kPromtool = "/usr/bin/promtool";
const char* kCurl = "/usr/bin/curl";

bool installed(const char* path) { return ::access(path, X_OK) == 0; }

// Where screenshots go: test-artifacts/ beside the build's bin/ (kept after the test).
fs::path artifacts_dir() {
  fs::path dir = omnilearn_binary().parent_path().parent_path() / "test-artifacts";
  fs::create_directories(dir);
  return dir;
}

// "http://127.0.0.1:PORT/" (and "?token=..." when there is one) from the head's output.
struct DashboardUrl {
  std::string base;  // "http://HOST:PORT"
  std::string host;
  int port = 0;
  std::string token;  // "" when none is needed
};
std::optional<DashboardUrl> dashboard_url(ChildProcess& head) {
  auto line = head.wait_for_output("dashboard: ", 15s);
  if (!line) return std::nullopt;
  std::smatch m;
  static const std::regex pattern(
      R"(dashboard: (http://([0-9.]+):([0-9]+))/(\?token=([0-9a-f]+))?)");
  if (!std::regex_search(*line, m, pattern)) return std::nullopt;
  return DashboardUrl{m[1], m[2], std::stoi(m[3]), m[5]};
}

// A local TCP listener that records the first line of every request made to it: a browser
// pointed at it as its proxy sends it every request it makes to the network.
class RequestTrap {
 public:
  RequestTrap() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 16);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) continue;
        char buffer[512];
        pollfd c{client, POLLIN, 0};
        ssize_t n = ::poll(&c, 1, 1000) > 0 ? ::read(client, buffer, sizeof buffer) : 0;
        std::string line(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
        line = line.substr(0, line.find("\r\n"));
        {
          std::lock_guard lock(mutex_);
          requests_.push_back(line);
        }
        ::close(client);
      }
    });
  }
  ~RequestTrap() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;  // guarded by mutex_
  std::thread thread_;
};

// Chromium's own traffic, which its switches do not all turn off (component updates, sign-in,
// network time): not the page's. Anything else a page asks for is the page's.
bool browser_service_request(const std::string& line) {
  for (const char* host : {"update.googleapis.com", "accounts.google.com", "clients2.google.com"}) {
    if (line.find(std::string(" ") + host + ":") != std::string::npos ||
        line.find(std::string("//") + host + "/") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Runs headless Chromium on `url` with a fresh profile in `scratch`: `--dump-dom` (returned) or
// `--screenshot=FILE`. The page gets a few seconds of (virtual) time to fetch and draw.
CommandResult chromium(const ScratchDir& scratch, const std::string& url,
                       std::vector<std::string> extra) {
  static int profiles = 0;
  std::vector<std::string> argv{
      kChromium,
      "--headless",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-default-apps",
      "--no-pings",
      "--window-size=1400,1700",
      "--virtual-time-budget=6000",
      "--user-data-dir=" + (scratch.path() / ("chromium-" + std::to_string(++profiles))).string()};
  if (::geteuid() == 0) argv.push_back("--no-sandbox");  // Chromium refuses root otherwise
  for (auto& e : extra) argv.push_back(std::move(e));
  argv.push_back(url);
  return run_command(argv, 90s);
}

// The first src= or href= in `html` whose value is an http(s) or protocol-relative URL, or "".
// (A plain scan: std::regex recurses per character and a report is a quarter megabyte.)
std::string remote_reference(const std::string& html) {
  for (const std::string attribute : {"src=", "href="}) {
    for (auto at = html.find(attribute); at != std::string::npos;
         at = html.find(attribute, at + 1)) {
      auto value = at + attribute.size();
      while (value < html.size() &&
             (html[value] == '"' || html[value] == '\'' || html[value] == ' ')) {
        ++value;
      }
      for (const char* prefix : {"http:", "https:", "//"}) {
        if (html.compare(value, std::strlen(prefix), prefix) == 0) return html.substr(at, 80);
      }
    }
  }
  return "";
}

std::set<std::string> node_rows(const std::string& dom) {
  std::set<std::string> names;
  static const std::regex row(R"re(<tr data-node="([^"]*)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator();
       ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// data-points of each chart canvas in a dumped DOM.
std::map<std::string, int> chart_points(const std::string& dom) {
  std::map<std::string, int> points;
  static const std::regex canvas(R"re(<canvas data-chart="([a-z]+)" data-points="([0-9]+)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), canvas); it != std::sregex_iterator();
       ++it) {
    points[(*it)[1]] = std::stoi((*it)[2]);
  }
  return points;
}

Json get_json(httplib::Client& client, const std::string& path) {
  auto response = client.Get(path.c_str());
  if (!response) throw std::runtime_error("GET " + path + ": no response");
  if (response->status != 200) {
    throw std::runtime_error("GET " + path + ": " + std::to_string(response->status) + " " +
                             response->body);
  }
  return Json::parse(response->body);
}

// Every event of a job through /api/jobs/<id>/events, page by page.
Json all_events(httplib::Client& client, const std::string& job) {
  Json events = Json::array();
  std::uint64_t since = 0;
  while (true) {
    auto page = get_json(client, "/api/jobs/" + job + "/events?since=" + std::to_string(since));
    for (auto& e : page["events"]) events.push_back(e);
    if (page["events"].empty()) return events;
    since = page["next"].get<std::uint64_t>();
  }
}

// A node as `status --json` shows it, less what changes from one moment to the next.
Json stable_node(Json node) {
  node.erase("last_heartbeat_ms");
  node.erase("usage");
  node.erase("actors");
  return node;
}

class Dashboard : public JobTest {};

TEST_F(Dashboard, ABrowserSeesTheClusterAndALiveJobAndTheApiAgreesWithTheCli) {
  auto head_options = job_head_options();
  head_options.extra_args = {"--dashboard-port", "0"};
  auto& cluster = start_cluster(head_options);
  auto url = dashboard_url(cluster.head().process());
  ASSERT_TRUE(url) << cluster.head().process().describe();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->token, "") << "no token on loopback";
  const std::vector<std::string> nodes{"dash-a", "dash-b", "dash-c"};
  start_worker("dash-a");
  start_worker("dash-b");
  start_worker("dash-c", {"--slowdown", "3"});
  for (const auto& n : nodes) ASSERT_TRUE(cluster.wait_worker_joined(n, 15s));

  ScratchDir scratch("dashboard");
  // Long enough to be running while the browser looks; stopped once it has.
  JobRun run(cluster, scratch.write("job.toml", synthetic_elastic_job("dash", 100000, 5)),
             scratch.path() / "run");
  ASSERT_TRUE(run.wait_for_event("step", 60s, [](const Json& e) {
    return e.at("step").get<int>() >= 30 && e.at("batches").size() == 3;
  })) << run.describe();

  httplib::Client client(url->host, url->port);
  client.set_read_timeout(10, 0);

  // What could not be checked for want of a program: the test ends skipped, saying so.
  std::string missing;
  // A browser, while the job trains.
  if (!installed(kChromium)) {
    missing +=
        "chromium is not installed (Debian package chromium; scripts/test.sh installs "
        "it): the browser checks did not run. ";
  } else {
    auto page = chromium(scratch, url->base + "/", {"--dump-dom"});
    ASSERT_EQ(page.status.code, 0) << page.err;
    auto rows = node_rows(page.out);
    for (const auto& n : nodes)
      EXPECT_TRUE(rows.count(n)) << "node " << n << " not listed:\n" << page.out;
    EXPECT_NE(page.out.find("data-job=\"" + run.id() + "\""), std::string::npos);

    const std::string job_page = url->base + "/jobs/" + run.id();
    auto job = chromium(scratch, job_page, {"--dump-dom"});
    ASSERT_EQ(job.status.code, 0) << job.err;
    auto points = chart_points(job.out);
    EXPECT_GT(points["batches"], 0) << job.out;
    EXPECT_GT(points["loss"], 0);
    EXPECT_GT(points["throughput"], 0);
    EXPECT_GT(points["timeline"], 0);

    const auto screenshot = artifacts_dir() / "dashboard-job.png";
    fs::remove(screenshot);
    auto shot = chromium(scratch, job_page, {"--screenshot=" + screenshot.string()});
    ASSERT_EQ(shot.status.code, 0) << shot.err;
    std::ifstream png(screenshot, std::ios::binary);
    std::string magic(8, '\0');
    png.read(magic.data(), 8);
    EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8)) << screenshot;
    EXPECT_GT(fs::file_size(screenshot), 20000u) << "a screenshot of charts, not a blank page";
    std::printf("screenshot: %s\n", screenshot.c_str());
  }

  // Prometheus.
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain; version=0.0.4"),
            std::string::npos);
  for (const auto& n : nodes) {
    EXPECT_TRUE(std::regex_search(
        metrics->body, std::regex("omnilearn_node_up\\{node=\"" + n + "\",id=\"[^\"]+\"\\} 1\n")))
        << n << "\n"
        << metrics->body;
  }
  std::smatch steps;
  ASSERT_TRUE(std::regex_search(
      metrics->body, steps,
      std::regex("omnilearn_job_step_seconds_count\\{job=\"" + run.id() + "\"\\} ([0-9]+)\n")));
  EXPECT_GE(std::stoi(steps[1]), 30);
  EXPECT_TRUE(std::regex_search(
      metrics->body, std::regex("omnilearn_worker_batch\\{job=\"" + run.id() + "\",trainer=")));
  EXPECT_NE(metrics->body.find("omnilearn_messages_received_total "), std::string::npos);
  if (!installed(kPromtool)) {
    missing +=
        "promtool is not installed (Debian package prometheus; scripts/test.sh installs "
        "it): /metrics was not checked by it. ";
  } else {
    auto file = scratch.write("metrics.txt", metrics->body);
    auto check = run_command(
        {"/bin/sh", "-c", std::string(kPromtool) + " check metrics < " + file.string()}, 30s);
    EXPECT_EQ(check.status.code, 0) << check.out << check.err;
    EXPECT_EQ(check.out + check.err, "") << "promtool's lint found problems";
  }

  // The job ends (stopped); then the API and the CLI must say the same.
  auto stop = run_omnilearn({"stop", run.id(), "--address", cluster.address()}, 20s);
  ASSERT_EQ(stop.status.code, 0) << stop.err;
  auto summary = run.wait_finished(60s);
  ASSERT_TRUE(summary) << run.describe();
  auto status = cluster.wait_for_status(
      [&](const ClusterStatus& s) {
        for (const auto& j : s.json()["jobs"]) {
          if (j["id"] == run.id()) return j["state"] != "running";
        }
        return false;
      },
      20s);
  ASSERT_TRUE(status);
  std::this_thread::sleep_for(300ms);  // past the dashboard's cache (250 ms)
  status = cluster.status();
  ASSERT_TRUE(status);
  EXPECT_EQ(get_json(client, "/api/jobs"), status->json()["jobs"]);
  auto api_nodes = get_json(client, "/api/nodes");
  ASSERT_EQ(api_nodes.size(), status->nodes().size());
  std::map<std::string, Json> by_id;
  for (const auto& n : status->nodes()) by_id[n["id"]] = stable_node(n);
  for (const auto& n : api_nodes) EXPECT_EQ(stable_node(n), by_id[n["id"]]);
  auto api_status = get_json(client, "/api/status");
  for (const auto& [key, value] : status->json().items()) EXPECT_TRUE(api_status.contains(key));

  // events.jsonl, line for line.
  auto events = all_events(client, run.id());
  auto file_events = read_events(run.run_dir());
  ASSERT_EQ(events.size(), file_events.size());
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i], file_events[i]) << i;
  auto unknown = client.Get("/api/jobs/no-such-job/events");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto bad = client.Get(("/api/jobs/" + run.id() + "/events?since=-1").c_str());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  // A page addressed to another host name (DNS rebinding) is refused on loopback.
  auto rebound = client.Get("/api/status", {{"Host", "attacker.example"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);

  // The report of the finished run: every chart drawn, and no request to anywhere.
  const auto report_file = scratch.path() / "report.html";
  auto report = run_omnilearn({"report", run.run_dir().string(), "-o", report_file.string()}, 120s);
  ASSERT_EQ(report.status.code, 0) << report.out << report.err;
  EXPECT_NE(report.out.find("report: " + report_file.string()), std::string::npos) << report.out;
  if (installed(kChromium)) {
    for (const char* chart : {"loss", "batches", "throughput", "steptime", "timeline"}) {
      EXPECT_NE(report.out.find(std::string("report-") + chart + ".png"), std::string::npos)
          << chart << ": " << report.out << report.err;
    }
    RequestTrap trap;
    auto offline = chromium(scratch, "file://" + report_file.string(),
                            {"--proxy-server=http://127.0.0.1:" + std::to_string(trap.port()),
                             "--proxy-bypass-list=<-loopback>", "--dump-dom"});
    ASSERT_EQ(offline.status.code, 0) << offline.err;
    auto points = chart_points(offline.out);
    for (const char* chart : {"loss", "batches", "throughput", "steptime", "timeline"}) {
      EXPECT_GT(points[chart], 0) << chart << " is empty in the report";
    }
    for (const auto& request : trap.requests()) {
      EXPECT_TRUE(browser_service_request(request)) << "the report made a request: " << request;
    }
    // The file itself names nothing to load from elsewhere.
    std::ifstream in(report_file);
    const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
    EXPECT_EQ(remote_reference(html), "");
  }
  if (!missing.empty()) GTEST_SKIP() << missing;
}

TEST_F(Dashboard, BeyondLoopbackEveryRequestNeedsTheClustersToken) {
  // 127.0.0.2 is still this machine's loopback, but not the default address: the head treats
  // it as "another interface", which is what this test needs without touching a real one.
  auto head_options = job_head_options();
  head_options.extra_args = {"--dashboard-port", "0", "--dashboard-host", "127.0.0.2"};
  auto& cluster = start_cluster(head_options);
  auto url = dashboard_url(cluster.head().process());
  ASSERT_TRUE(url) << cluster.head().process().describe();
  EXPECT_EQ(url->host, "127.0.0.2");
  ASSERT_EQ(url->token.size(), 64u) << "the head prints the URL with its token";
  auto derived = run_omnilearn({"dashboard-token"});
  ASSERT_EQ(derived.status.code, 0) << derived.err;
  EXPECT_EQ(derived.out, url->token + "\n") << "anyone with the cluster file derives the token";
  start_worker("tok-a");
  ASSERT_TRUE(cluster.wait_worker_joined("tok-a", 15s));

  httplib::Client client(url->host, url->port);
  client.set_read_timeout(10, 0);
  for (const char* path : {"/", "/api/status", "/api/nodes", "/metrics", "/static/chart.min.js"}) {
    auto plain = client.Get(path);
    ASSERT_TRUE(plain) << path;
    EXPECT_EQ(plain->status, 401) << path;
    auto wrong = client.Get(path, {{"Authorization", "Bearer " + std::string(64, '0')}});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    auto right = client.Get(path, {{"Authorization", "Bearer " + url->token}});
    ASSERT_TRUE(right);
    EXPECT_EQ(right->status, 200) << path;
  }
  auto nodes = get_json(client, "/api/nodes?token=" + url->token);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["name"], "tok-a");
  // Liveness probes carry no token: /healthz answers them, and says nothing but "ok".
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto posted = client.Post("/healthz", "", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 405) << "read-only, /healthz included";

  if (!installed(kChromium)) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium; scripts/test.sh "
                    "installs it): the browser was not checked";
  }
  ScratchDir scratch("dashboard-token");
  auto refused = chromium(scratch, url->base + "/", {"--dump-dom"});
  ASSERT_EQ(refused.status.code, 0) << refused.err;
  EXPECT_TRUE(node_rows(refused.out).empty()) << refused.out;
  EXPECT_NE(refused.out.find("needs its token"), std::string::npos) << refused.out;
  auto admitted = chromium(scratch, url->base + "/?token=" + url->token, {"--dump-dom"});
  ASSERT_EQ(admitted.status.code, 0) << admitted.err;
  EXPECT_EQ(node_rows(admitted.out), std::set<std::string>{"tok-a"}) << admitted.out;
}

// An HTTP GET with curl, run through `in_namespace` (`ip netns exec NS`): the request starts in
// that namespace and goes nowhere else. `code` is the HTTP status, or 0 with curl's error in
// `error` when there was no answer.
struct CurlAnswer {
  int code = 0;
  std::string body;
  std::string error;
};
CurlAnswer curl_get(const std::vector<std::string>& in_namespace, const std::string& url,
                    const std::vector<std::string>& headers = {}) {
  std::vector<std::string> argv = in_namespace;
  // --noproxy: a proxy from the environment would send the request out of the namespace.
  for (const char* a : {kCurl, "--silent", "--show-error", "--max-time", "10", "--noproxy", "*",
                        "--write-out", "\n%{http_code}"}) {
    argv.push_back(a);
  }
  for (const auto& h : headers) {
    argv.push_back("--header");
    argv.push_back(h);
  }
  argv.push_back(url);
  auto result = run_command(argv, 20s);
  CurlAnswer answer;
  while (!result.out.empty() && result.out.back() == '\n') result.out.pop_back();
  auto last = result.out.rfind('\n');
  if (result.status.code != 0 || last == std::string::npos) {
    answer.error = result.status.to_string() + ": " + result.err;
    return answer;
  }
  answer.body = result.out.substr(0, last);
  answer.code = std::atoi(result.out.c_str() + last + 1);
  return answer;
}

// "Bound elsewhere" on a real interface, not a second loopback address: the head runs in a
// network namespace the test makes (NetworkPair: two namespaces joined by a veth pair; nothing
// outside them is touched) with its dashboard on the namespace's veth address. curl asks it from
// the other namespace, across the link, as another machine would, and from the head's own:
// every request without the cluster's token is refused (401), every one with it answered (200);
// nothing listens on the head namespace's loopback.
TEST(DashboardOnAnInterface, EveryRequestNeedsTheClustersTokenAcrossTheNetwork) {
  if (!installed(kCurl)) {
    GTEST_SKIP() << "curl is not installed (Debian package curl): the dashboard on a "
                    "non-loopback interface was not checked";
  }
  NetworkPair network;
  std::string why;
  if (!network.create(&why)) GTEST_SKIP() << "dashboard on an interface skipped: " << why;
  NamespacedCluster cluster(
      network, 200ms, 1500ms,
      {"--dashboard-port", "0", "--dashboard-host", NetworkPair::kHeadAddress});
  auto url = dashboard_url(cluster.head());
  ASSERT_TRUE(url) << cluster.head().describe();
  EXPECT_EQ(url->host, NetworkPair::kHeadAddress);
  ASSERT_EQ(url->token.size(), 64u) << "the head prints the URL with its token";
  auto derived = run_omnilearn({"dashboard-token"});
  ASSERT_EQ(derived.status.code, 0) << derived.err;
  EXPECT_EQ(derived.out, url->token + "\n") << "anyone with the cluster file derives the token";
  cluster.start_worker("far-a", Side::kWorker);
  ASSERT_TRUE(
      cluster.wait_for_status([](const ClusterStatus& s) { return s.nodes().size() == 1; }, 20s))
      << cluster.last_status_text();

  const auto far = network.in_worker_namespace();
  const auto near = network.in_head_namespace();
  const std::string bearer = "Authorization: Bearer " + url->token;
  for (const char* path : {"/", "/api/status", "/api/nodes", "/metrics", "/static/chart.min.js"}) {
    SCOPED_TRACE(path);
    const std::string target = url->base + path;
    for (const auto* side : {&far, &near}) {
      auto plain = curl_get(*side, target);
      EXPECT_EQ(plain.code, 401) << plain.error << plain.body;
      auto wrong = curl_get(*side, target, {"Authorization: Bearer " + std::string(64, '0')});
      EXPECT_EQ(wrong.code, 401) << wrong.error << wrong.body;
      auto right = curl_get(*side, target, {bearer});
      EXPECT_EQ(right.code, 200) << right.error << right.body;
    }
  }
  auto refused = curl_get(far, url->base + "/api/nodes");
  EXPECT_NE(refused.body.find("needs its token"), std::string::npos) << refused.body;
  EXPECT_EQ(refused.body.find("far-a"), std::string::npos) << "a refusal shows nothing";
  auto nodes = curl_get(far, url->base + "/api/nodes?token=" + url->token);
  ASSERT_EQ(nodes.code, 200) << nodes.error << nodes.body;
  auto parsed = Json::parse(nodes.body, nullptr, false);
  ASSERT_TRUE(parsed.is_array() && parsed.size() == 1u) << nodes.body;
  EXPECT_EQ(parsed[0]["name"], "far-a");
  // Bound to the interface only: the head namespace's loopback has no dashboard.
  auto loopback =
      curl_get(near, "http://127.0.0.1:" + std::to_string(url->port) + "/api/status", {bearer});
  EXPECT_EQ(loopback.code, 0) << "answered on loopback: " << loopback.body;
}

TEST(DashboardFlags, AnInsecureHeadCannotServeBeyondLoopback) {
  auto result = run_omnilearn({"head", "--insecure", "--port", "0", "--dashboard-port", "0",
                               "--dashboard-host", "127.0.0.2"},
                              20s);
  EXPECT_EQ(result.status.code, 2) << result.out << result.err;
  EXPECT_NE(result.err.find("--dashboard-host 127.0.0.2"), std::string::npos) << result.err;
}

// Whether process `pid` is still running (a zombie has ended; it only waits to be reaped).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto state = line.rfind(") ");
  return state != std::string::npos && state + 2 < line.size() && line[state + 2] != 'Z';
}

// The first line of `file` as a PID, or 0.
pid_t read_pid(const fs::path& file) {
  std::ifstream in(file);
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

// `run` redraws one progress line where it is asked to (a terminal; here forced, since ctest
// gives none), prints plain event lines where not, and names the run's report under the summary:
// with a PNG per chart beside it, drawn by the same headless Chromium `omnilearn report` uses;
// and, when the browser hangs, with the HTML alone once the browser has been killed (the plain
// run's "Chromium" is a script that never finishes, nor does the helper it starts).
TEST(DashboardRun, ProgressRedrawsOnATerminalAndTheSummaryNamesTheReportAndItsCharts) {
  ScratchDir scratch("dashboard-run");
  auto job = scratch.write("job.toml", synthetic_elastic_job("progress", 40, 3));
  const auto pid_dir = scratch.path() / "hung-browser";
  fs::create_directories(pid_dir);
  const std::string script = "#!/bin/sh\necho $$ > " + (pid_dir / "browser.pid").string() +
                             "\nsleep 600 &\necho $! > " + (pid_dir / "helper.pid").string() +
                             "\nwait\n";
  const auto hung_browser = scratch.write("hung-chromium.sh", script);
  fs::permissions(hung_browser, fs::perms::owner_all);
  std::string missing;
  for (const bool live : {true, false}) {
    SCOPED_TRACE(live ? "live, with Chromium" : "plain, with a Chromium that hangs");
    auto run_dir = scratch.path() / (live ? "live" : "plain");
    ProcessOptions options;
    if (live) {
      options.env = {"OMNILEARN_PROGRESS=live"};
      // The browser the test looks for is the one `run` uses; none at all where it is missing.
      options.env.push_back(std::string("OMNILEARN_CHROMIUM=") +
                            (installed(kChromium) ? kChromium : "/nonexistent/chromium"));
    } else {
      options.env = {"OMNILEARN_CHROMIUM=" + hung_browser.string(), "OMNILEARN_REPORT_TIMEOUT_S=3"};
    }
    auto result = run_omnilearn(
        {"run", job.string(), "--local", "2", "--run-dir", run_dir.string()}, 180s, options);
    ASSERT_FALSE(result.timed_out) << result.out << result.err;
    ASSERT_EQ(result.status.code, 0) << result.out << result.err;
    const bool redrawn = result.out.find("\r\x1b[2Kstep ") != std::string::npos;
    const bool plain_steps = result.out.find("  epoch ") != std::string::npos;
    EXPECT_EQ(redrawn, live) << result.out;
    EXPECT_EQ(plain_steps, !live) << result.out;
    if (live) {
      EXPECT_NE(result.out.find("/40 "), std::string::npos) << "step/total" << result.out;
      EXPECT_NE(result.out.find("ETA"), std::string::npos) << result.out;
    }
    EXPECT_NE(result.out.find("report: " + (run_dir / "report.html").string()), std::string::npos)
        << result.out;
    ASSERT_TRUE(fs::exists(run_dir / "report.html"));
    std::ifstream in(run_dir / "report.html");
    const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(html.find("</html>"), std::string::npos) << "the HTML report is complete";
    if (live && !installed(kChromium)) {
      EXPECT_NE(result.err.find("no PNGs: no headless Chromium found"), std::string::npos)
          << result.err;
      missing =
          "chromium is not installed (Debian package chromium; scripts/test.sh installs it): "
          "the PNGs `run` writes beside its report were not checked";
    } else if (live) {
      for (const auto& chart : {"loss", "batches", "throughput", "steptime", "timeline"}) {
        const auto png = run_dir / (std::string("report-") + chart + ".png");
        EXPECT_NE(result.out.find("chart: " + png.string()), std::string::npos)
            << chart << ": " << result.out << result.err;
        ASSERT_TRUE(fs::exists(png)) << png << "\n" << result.out << result.err;
        std::ifstream file(png, std::ios::binary);
        std::string magic(8, '\0');
        file.read(magic.data(), 8);
        EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8)) << png;
        EXPECT_GT(fs::file_size(png), 1000u) << png << ": a chart, not an empty image";
      }
    } else {
      EXPECT_NE(result.err.find(hung_browser.string() +
                                " did not draw the charts within 3 s and was killed (pid "),
                std::string::npos)
          << result.err;
      EXPECT_NE(result.err.find("the HTML report is complete"), std::string::npos) << result.err;
      EXPECT_EQ(result.out.find("chart: "), std::string::npos) << result.out;
      for (const auto& entry : fs::directory_iterator(run_dir)) {
        EXPECT_NE(entry.path().extension(), ".png") << entry.path();
      }
      const pid_t browser = read_pid(pid_dir / "browser.pid");
      const pid_t helper = read_pid(pid_dir / "helper.pid");
      ASSERT_GT(browser, 0) << "the stand-in browser never started";
      ASSERT_GT(helper, 0);
      EXPECT_NE(result.err.find("(pid " + std::to_string(browser) + ")"), std::string::npos)
          << result.err;
      // Its helper was killed with it (a process group), not left to the init process.
      EXPECT_TRUE(wait_until([&] { return !running(browser) && !running(helper); }, 5s))
          << "the hung browser (pid " << browser << ") or its helper (pid " << helper
          << ") outlived `run`";
    }
  }
  if (!missing.empty()) GTEST_SKIP() << missing;
}

// An asynchronous job's report: besides the common charts, the staleness of each
// interval's pushes and each worker's updates per second, drawn by a real headless Chromium
// from the report alone; its evaluations are on the loss chart.
TEST(DashboardRun, AnAsynchronousRunsReportDrawsStalenessAndUpdatesPerWorker) {
  if (!installed(kChromium)) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium; scripts/test.sh "
                    "installs it): the ASP charts were not drawn";
  }
  ScratchDir scratch("dashboard-asp");
  const auto job = scratch.write("asp.toml", R"(
[job]
name = "asp-report"
mode = "asp"

[model]
kind = "mlp"
hidden = [32]

[data]
dataset = "synthetic"
train_size = 2048
test_size = 256

[train]
global_batch = 64
steps = 1500
eval_every = 300
optimizer = "sgd"
lr = 0.01
momentum = 0.9
seed = 3

[controller]
policy = "proportional"
min_batch = 4
interval = 10
cooldown = 2

[elastic]
min_workers = 2
max_workers = 2

[asp]
servers = 1
)");
  const auto run_dir = scratch.path() / "run";
  ProcessOptions options;
  options.env = {std::string("OMNILEARN_CHROMIUM=") + kChromium};
  auto result = run_omnilearn({"run", job.string(), "--local", "2", "--slowdown", "1,3",
                               "--run-dir", run_dir.string()},
                              180s, options);
  ASSERT_FALSE(result.timed_out) << result.out << result.err;
  ASSERT_EQ(result.status.code, 0) << result.out << result.err;
  for (const char* chart : {"loss", "batches", "throughput", "steptime", "staleness", "updates",
                            "timeline"}) {
    const auto png = run_dir / (std::string("report-") + chart + ".png");
    EXPECT_NE(result.out.find("chart: " + png.string()), std::string::npos)
        << chart << ": " << result.out << result.err;
    EXPECT_TRUE(fs::exists(png)) << png;
  }
  const auto intervals = events_named(read_events(run_dir), "asp_interval");
  ASSERT_GE(intervals.size(), 2u) << "too short a job to draw a line";
  std::size_t evaluations = 0, worker_points = 0;
  for (const auto& e : intervals) {
    evaluations += e.contains("test_accuracy") ? 1 : 0;
    for (const auto& [name, w] : e.at("workers").items()) worker_points += w.value("live", true);
  }
  ASSERT_GE(evaluations, 1u);
  auto page = chromium(scratch, "file://" + (run_dir / "report.html").string(), {"--dump-dom"});
  ASSERT_EQ(page.status.code, 0) << page.err;
  auto points = chart_points(page.out);
  // mean, p95 and max per interval; each worker's updates/s per interval.
  EXPECT_EQ(points["staleness"], static_cast<int>(3 * intervals.size())) << page.out.size();
  EXPECT_EQ(points["updates"], static_cast<int>(worker_points));
  // The loss per interval and the evaluations.
  EXPECT_EQ(points["loss"], static_cast<int>(intervals.size() + evaluations));
}

}  // namespace
}  // namespace omnilearn::testing
