#include "dashboard/dashboard_server.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "dashboard/access.hpp"
#include "dashboard/assets.hpp"
#include "dashboard/cluster_feed.hpp"

namespace omnilearn::dashboard {
namespace {

using Json = nlohmann::json;

constexpr const char* kHealthPath = "/healthz";

void send_json(httplib::Response& response, const Json& body, int status = 200) {
  response.status = status;
  response.set_header("Cache-Control", "no-store");
  response.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& response, int status, const std::string& message) {
  send_json(response, Json{{"error", message}}, status);
}

std::string host_for_url(const std::string& host) {
  if (host == "0.0.0.0" || host == "::") return "HOST";
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

struct DashboardServer::Impl {
  DashboardOptions options;
  ClusterFeed feed;
  std::string chart_js;
  httplib::Server server;
  std::thread thread;
  int port = 0;

  Impl(runtime::ActorSystem& system, DashboardOptions opts)
      : options(std::move(opts)),
        feed(std::make_unique<ActorHeadSource>(system, options.ask_timeout), options.max_age),
        chart_js(load_chart_js()) {}

  // Every request passes here first: the token (or, on loopback, a loopback Host header).
  httplib::Server::HandlerResponse admit(const httplib::Request& request,
                                         httplib::Response& response) {
    if (request.method != "GET" && request.method != "HEAD") {
      send_error(response, 405, "the dashboard is read-only");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Liveness for supervisors (a Kubernetes probe comes from the node, without the token):
    // it says only whether the head's actors answer.
    if (request.path == kHealthPath) return httplib::Server::HandlerResponse::Unhandled;
    if (options.token.empty()) {
      if (!is_loopback_host_header(request.get_header_value("Host"))) {
        send_error(response, 403,
                   "this dashboard answers only requests addressed to a loopback host");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    }
    auto presented =
        presented_token(request.get_header_value("Authorization"), request.get_param_value("token"),
                        request.get_header_value("Cookie"));
    if (!presented || !token_matches(options.token, *presented)) {
      send_error(response, 401,
                 "this dashboard needs its token (`omnilearn dashboard-token` prints it from the "
                 "cluster file): open it as /?token=TOKEN or send 'Authorization: Bearer TOKEN'");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (request.has_param("token")) {
      // The pages' own requests then carry the token without putting it into every URL.
      response.set_header("Set-Cookie", std::string(kTokenCookie) + "=" + *presented +
                                            "; Path=/; HttpOnly; SameSite=Strict");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void serve_asset(const std::string& name, httplib::Response& response) {
    auto content = asset(name);
    if (!content) {
      send_error(response, 404, "no such file: " + name);
      return;
    }
    response.set_content(std::string(*content), content_type_for(name).c_str());
  }

  void routes() {
    server.set_pre_routing_handler(
        [this](const httplib::Request& request, httplib::Response& response) {
          return admit(request, response);
        });
    server.Get("/", [this](const httplib::Request&, httplib::Response& response) {
      serve_asset("cluster.html", response);
    });
    server.Get(R"(/jobs/([A-Za-z0-9_.-]+))",
               [this](const httplib::Request&, httplib::Response& response) {
                 serve_asset("job.html", response);
               });
    server.Get("/static/chart.min.js", [this](const httplib::Request&, httplib::Response& r) {
      r.set_header("Cache-Control", "max-age=3600");
      r.set_content(chart_js, "text/javascript; charset=utf-8");
    });
    server.Get(R"(/static/([A-Za-z0-9_.-]+\.(js|css)))",
               [this](const httplib::Request& request, httplib::Response& response) {
                 serve_asset(request.matches[1], response);
               });
    server.Get(kHealthPath, [this](const httplib::Request&, httplib::Response& response) {
      if (!feed.status()) return send_error(response, 503, "the head's actors did not answer");
      response.set_content("ok\n", "text/plain; charset=utf-8");
    });
    server.Get("/api/status", [this](const httplib::Request&, httplib::Response& response) {
      auto status = feed.status();
      if (!status) return send_error(response, 503, "the head's actors did not answer");
      send_json(response, *status);
    });
    server.Get("/api/nodes", [this](const httplib::Request&, httplib::Response& response) {
      auto status = feed.status();
      if (!status) return send_error(response, 503, "the head's actors did not answer");
      send_json(response, (*status)["nodes"]);
    });
    server.Get("/api/jobs", [this](const httplib::Request&, httplib::Response& response) {
      auto status = feed.status();
      if (!status) return send_error(response, 503, "the head's actors did not answer");
      send_json(response, (*status)["jobs"]);
    });
    server.Get(R"(/api/jobs/([A-Za-z0-9_.-]+))",
               [this](const httplib::Request& request, httplib::Response& response) {
                 auto charts = feed.job_charts(request.matches[1]);
                 if (!charts) {
                   return send_error(response, 404,
                                     "no job " + std::string(request.matches[1]) + " at this head");
                 }
                 send_json(response, *charts);
               });
    server.Get(R"(/api/jobs/([A-Za-z0-9_.-]+)/events)",
               [this](const httplib::Request& request, httplib::Response& response) {
                 std::uint64_t since = 0;
                 if (request.has_param("since")) {
                   const auto text = request.get_param_value("since");
                   try {
                     std::size_t used = 0;
                     since = std::stoull(text, &used);
                     if (used != text.size() || text[0] == '-') throw std::invalid_argument(text);
                   } catch (const std::exception&) {
                     return send_error(response, 400,
                                       "since must be a non-negative integer, not '" + text + "'");
                   }
                 }
                 auto page = feed.events(request.matches[1], since);
                 if (!page.found) {
                   return send_error(response, 404,
                                     "no job " + std::string(request.matches[1]) + " at this head");
                 }
                 send_json(response, Json{{"job_id", std::string(request.matches[1])},
                                          {"events", std::move(page.events)},
                                          {"next", page.next},
                                          {"finished", page.finished},
                                          {"dropped", page.dropped}});
               });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      auto text = feed.metrics();
      if (!text) return send_error(response, 503, "the head's actors did not answer");
      response.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
    });
    server.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
      if (response.body.empty()) {
        send_error(response, response.status,
                   response.status == 404 ? "no such page: " + request.path : "error");
      }
    });
    server.set_exception_handler(
        [](const httplib::Request& request, httplib::Response& response, std::exception_ptr e) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& ex) {
            what = ex.what();
          } catch (...) {
          }
          spdlog::warn("dashboard: {} {}: {}", request.method, request.path, what);
          send_error(response, 500, what);
        });
  }
};

DashboardServer::DashboardServer(runtime::ActorSystem& system, DashboardOptions options) {
  try {
    impl_ = std::make_unique<Impl>(system, std::move(options));
  } catch (const std::runtime_error& e) {
    throw DashboardError(e.what());
  }
  auto& impl = *impl_;
  impl.routes();
  impl.server.set_keep_alive_timeout(2);  // so a stop never waits long for an idle browser
  impl.server.set_payload_max_length(64 * 1024);
  if (impl.options.port == 0) {
    impl.port = impl.server.bind_to_any_port(impl.options.host);
  } else {
    impl.port =
        impl.server.bind_to_port(impl.options.host, impl.options.port) ? impl.options.port : -1;
  }
  if (impl.port <= 0) {
    throw DashboardError(
        fmt::format("the dashboard cannot listen on {}:{} (in use, or not an "
                    "address of this machine)",
                    impl.options.host, impl.options.port));
  }
  impl.thread = std::thread([&impl] { impl.server.listen_after_bind(); });
}

DashboardServer::~DashboardServer() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t DashboardServer::port() const { return static_cast<std::uint16_t>(impl_->port); }

std::string DashboardServer::base_url() const {
  return fmt::format("http://{}:{}/", host_for_url(impl_->options.host), impl_->port);
}

bool DashboardServer::needs_token() const { return !impl_->options.token.empty(); }

std::string DashboardServer::url() const {
  auto url = base_url();
  if (needs_token()) url += "?token=" + impl_->options.token;
  return url;
}

ProbeResult probe_dashboard(const std::string& host, std::uint16_t port, const std::string& token,
                            std::chrono::milliseconds timeout) {
  httplib::Client client(host, port);
  const auto seconds = static_cast<time_t>(timeout.count() / 1000);
  const auto micros = static_cast<time_t>((timeout.count() % 1000) * 1000);
  client.set_connection_timeout(seconds, micros);
  client.set_read_timeout(seconds, micros);
  auto response = client.Get(token.empty() ? "/" : "/?token=" + token);
  if (!response) return ProbeResult{0, httplib::to_string(response.error())};
  return ProbeResult{response->status, ""};
}

}  // namespace omnilearn::dashboard
