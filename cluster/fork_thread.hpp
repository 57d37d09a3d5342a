#pragma once
// One thread that outlives every child it forks. PR_SET_PDEATHSIG, which kills a trainer when its
// agent dies, fires when the *thread* that forked the child exits, not the process: an agent
// that forked from a handler would have its trainer killed whenever the actor pool retires the
// spare thread that handler happened to run on. Forking here ties the trainers to this thread,
// which lives as long as the agent that owns it.

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace omnilearn::actors {

class ForkThread {
 public:
  ForkThread();
  ~ForkThread();  // joins the thread; children forked here then get their death signal
  ForkThread(const ForkThread&) = delete;
  ForkThread& operator=(const ForkThread&) = delete;

  // Runs `fork_child` on the thread and returns what it returned (the child's pid, or -1 with
  // the fork's errno restored in this thread). `fork_child` forks; its child side never returns.
  pid_t run(const std::function<pid_t()>& fork_child);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  const std::function<pid_t()>* job_ = nullptr;  // guarded by mutex_
  bool done_ = false;                            // the job ran; guarded by mutex_
  pid_t result_ = -1;                            // guarded by mutex_
  int error_ = 0;                                // errno after the job; guarded by mutex_
  bool stopping_ = false;                        // guarded by mutex_
  std::mutex callers_;                           // one job at a time
  std::thread thread_;
};

}  // namespace omnilearn::actors
