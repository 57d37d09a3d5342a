#include "runtime/actor_scheduler.hpp"

#include <pthread.h>

#include <spdlog/spdlog.h>

#include "runtime/transport.hpp"

namespace omnilearn::runtime {
namespace {
// The pool the current thread belongs to (nullptr off every pool).
thread_local ActorScheduler* t_pool = nullptr;
}  // namespace

ActorScheduler::ActorScheduler(std::size_t threads, std::size_t batch)
    : target_(threads == 0 ? 1 : threads), batch_(batch == 0 ? 1 : batch) {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < target_; ++i) start_thread_locked(false);
}

ActorScheduler::~ActorScheduler() { stop(); }

void ActorScheduler::start_thread_locked(bool spare) {
  // Join spares that have ended, so a process that blocks now and then for months does not
  // keep a thread handle per wait.
  std::erase_if(workers_, [](Worker& worker) {
    if (!*worker.done) return false;
    worker.thread.join();
    return true;
  });
  auto done = std::make_shared<bool>(false);
  ++alive_;
  workers_.push_back(Worker{std::thread([this, spare, done] {
                              t_pool = this;
                              ::pthread_setname_np(::pthread_self(), spare ? "ol-actor+" : "ol-actor");
                              run(spare);
                              std::lock_guard lock(mutex_);
                              --alive_;
                              *done = true;
                            }),
                            done});
}

void ActorScheduler::schedule(Turn turn) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(turn));
    wake = idle_.wake_one();
  }
  if (wake) ready_.notify_one();
}

void ActorScheduler::run(bool spare) {
  std::unique_lock lock(mutex_);
  while (true) {
    if (queue_.empty()) {
      if (stopping_) return;
      // A spare is there only while others are blocked: it leaves once enough threads run
      // again, and never with turns queued (the wake-up it took may have been the only one).
      if (spare && alive_ - blocked_ > target_) return;
      idle_.about_to_wait();
      ready_.wait(lock);
      idle_.woke();
      continue;
    }
    Turn turn = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      turn();
    } catch (const std::exception& e) {
      // A turn handles its actor's exceptions itself; one that escapes is a bug in the system,
      // not a reason to lose a pool thread.
      spdlog::error("actor scheduler: a turn threw: {}", e.what());
    }
    lock.lock();
  }
}

void ActorScheduler::stop() {
  std::vector<Worker> workers;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    workers.swap(workers_);
  }
  ready_.notify_all();
  for (auto& worker : workers) {
    if (worker.thread.get_id() == std::this_thread::get_id()) {
      worker.thread.detach();  // stopped from one of its own turns: it ends on its own
    } else {
      worker.thread.join();
    }
  }
}

bool ActorScheduler::on_pool_thread() { return t_pool != nullptr; }

std::size_t ActorScheduler::threads() const {
  std::lock_guard lock(mutex_);
  return alive_;
}

void ActorScheduler::begin_blocking() {
  std::lock_guard lock(mutex_);
  ++blocked_;
  if (!stopping_ && alive_ - blocked_ < target_) start_thread_locked(true);
}

void ActorScheduler::end_blocking() {
  {
    std::lock_guard lock(mutex_);
    --blocked_;
  }
  ready_.notify_all();  // an idle spare may now leave
}

ActorScheduler::BlockingScope::BlockingScope() : scheduler_(t_pool) {
  if (scheduler_) {
    scheduler_->begin_blocking();
  } else {
    // An actor's turn on the I/O thread: let the standby read the sockets while this waits
    // (what it waits for may well need them).
    Transport::yield_io_role();
  }
}

ActorScheduler::BlockingScope::~BlockingScope() {
  if (scheduler_) scheduler_->end_blocking();
}

}  // namespace omnilearn::runtime
