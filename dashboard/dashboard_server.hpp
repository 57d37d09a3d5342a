#pragma once
// The head's dashboard: an HTTP server (cpp-httplib) on its own threads, serving the cluster
// page, live job pages, a JSON API, Prometheus /metrics and Debian's Chart.js. Read-only: no
// route changes anything in the cluster.
//
//   /                       cluster page (nodes, jobs)
//   /jobs/<id>              a job's live charts and timeline
//   /api/status             `omnilearn status --json`'s object
//   /api/nodes, /api/jobs   its "nodes" and "jobs" arrays
//   /api/jobs/<id>          a job's chart data (what its page draws) and its status
//   /api/jobs/<id>/events   ?since=N: its events.jsonl objects from N, {"events","next","finished"}
//   /metrics                Prometheus text format
//   /static/<file>          the pages' scripts and styles, and chart.min.js
//   /healthz                "ok" (200) while the head's actors answer, else 503; the one path
//                           answered without the token (liveness probes carry none)
//
// Threads: construct and destroy on one thread; the server answers on its own pool.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/actor_system.hpp"

namespace omnilearn::dashboard {

struct DashboardOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port the OS picks
  // Required on every request when non-empty (the head sets it for any host but the default
  // loopback ones: dashboard/access.hpp).
  std::string token;
  std::chrono::milliseconds ask_timeout{2000};  // each question to the head's actors
  std::chrono::milliseconds max_age{250};       // how long fetched state is reused
};

// Could not start: the address cannot be bound, Chart.js is missing, a token is needed.
class DashboardError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DashboardServer {
 public:
  // Binds and starts serving. `system` is the head's and must outlive the server.
  DashboardServer(runtime::ActorSystem& system, DashboardOptions options);
  ~DashboardServer();  // stops serving and joins the server's threads
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  std::uint16_t port() const;
  // "http://HOST:PORT/" (with "?token=..." when a token is needed): what to open.
  std::string url() const;
  // url() without the token: what may be told to anyone who asks the head (`omnilearn
  // dashboard` adds the token its cluster file gives).
  std::string base_url() const;
  bool needs_token() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What a GET of a dashboard's page answered: the HTTP status, or (status 0) why nothing came.
struct ProbeResult {
  int status = 0;
  std::string error;
};
// GETs "/" (with ?token= when `token` is not empty) of the dashboard at host:port, waiting at
// most `timeout`: whether a dashboard answers there (`omnilearn dashboard`).
ProbeResult probe_dashboard(const std::string& host, std::uint16_t port, const std::string& token,
                            std::chrono::milliseconds timeout);

}  // namespace omnilearn::dashboard
