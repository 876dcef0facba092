#include "runtime/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "runtime/error.h"

namespace sqlrl {

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

size_t ThreadPool::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check(!stopping_, "ThreadPool: submit after shutdown began");
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

bool ThreadPool::run_one_pending() {
  std::function<void()> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return false;
    job = std::move(queue_.front());
    queue_.pop_front();
  }
  job();
  return true;
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void ThreadPool::parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(1, min_chunk);
  // As many parts as the pool has threads, the caller's part included: SQLRL_THREADS=2 means two
  // busy cores, not two workers plus the caller (which oversubscribed a 2-core machine).
  size_t parts = std::min((n + min_chunk - 1) / min_chunk, std::max<size_t>(1, workers_.size()));
  if (parts <= 1) {
    body(0, n);
    return;
  }
  size_t chunk = (n + parts - 1) / parts;
  std::vector<std::future<void>> futures;
  futures.reserve(parts - 1);
  for (size_t p = 1; p < parts; ++p) {
    size_t begin = p * chunk, end = std::min(n, begin + chunk);
    if (begin >= end) break;
    futures.push_back(submit([&body, begin, end] { body(begin, end); }));
  }
  // The caller does the first chunk itself and then runs queued jobs while it waits: a nested
  // parallel_for inside a pool task can then never wait on a job that no thread will pick up.
  std::exception_ptr first_error;
  try {
    body(0, std::min(n, chunk));
  } catch (...) {
    first_error = std::current_exception();
  }
  for (auto& f : futures) {
    while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      if (!run_one_pending()) {
        f.wait();  // queue empty: every remaining chunk is already running on some thread
        break;
      }
    }
    try {
      f.get();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("SQLRL_THREADS");
    long n = env ? std::strtol(env, nullptr, 10) : 0;
    return n > 0 ? static_cast<size_t>(n) : size_t{0};
  }());
  return pool;
}

}  // namespace sqlrl
