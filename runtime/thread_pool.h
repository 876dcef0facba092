// A fixed-size thread pool: submit() returns a future; parallel_for() splits an index range.
// Tasks may submit further tasks. Exceptions thrown by a task reach whoever waits on its future.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace sqlrl {

class ThreadPool {
 public:
  explicit ThreadPool(size_t num_threads);  // 0 = hardware concurrency
  ~ThreadPool();                             // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size(); }
  size_t pending() const;  // queued, not yet started

  template <typename Fn>
  auto submit(Fn fn) -> std::future<std::invoke_result_t<Fn>> {
    using Result = std::invoke_result_t<Fn>;
    auto task = std::make_shared<std::packaged_task<Result()>>(std::move(fn));
    std::future<Result> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

  // Runs body(begin, end) over [0, n) in at most size() chunks, one on the calling thread; rethrows the
  // first exception after every chunk has finished.
  void parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& body);

 private:
  void enqueue(std::function<void()> job);
  void worker_loop();
  bool run_one_pending();  // runs one queued job on the calling thread; false if none

  std::vector<std::thread> workers_;
  std::deque<std::function<void()>> queue_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

// The process-wide pool used by CPU kernels; sized by SQLRL_THREADS or the core count.
ThreadPool& default_thread_pool();

}  // namespace sqlrl
