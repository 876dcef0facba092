#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>

#include "runtime/thread_pool.h"

namespace sqlrl {
namespace {

TEST(ThreadPool, ManySubmittersManyTasks) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> submitters;
  std::vector<std::vector<std::future<int>>> futures(8);
  for (int s = 0; s < 8; ++s) {
    submitters.emplace_back([&, s] {
      for (int i = 0; i < 2000; ++i)
        futures[s].push_back(pool.submit([&total, i] {
          total.fetch_add(i, std::memory_order_relaxed);
          return i;
        }));
    });
  }
  for (auto& t : submitters) t.join();
  int64_t returned = 0;
  for (auto& list : futures)
    for (auto& f : list) returned += f.get();
  int64_t expected = 8 * (1999 * 2000 / 2);
  EXPECT_EQ(total.load(), expected);
  EXPECT_EQ(returned, expected);
  EXPECT_EQ(pool.pending(), 0u);
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(hits.size(), 7, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.parallel_for(8, 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i)
      pool.parallel_for(100, 1, [&](size_t b2, size_t e2) { count.fetch_add(static_cast<int>(e2 - b2)); });
  });
  EXPECT_EQ(count.load(), 800);
}

TEST(ThreadPool, ExceptionsReachTheWaiter) {
  ThreadPool pool(2);
  auto f = pool.submit([]() -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW(f.get(), std::runtime_error);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](size_t b, size_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  // The pool still works afterwards.
  EXPECT_EQ(pool.submit([] { return 5; }).get(), 5);
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  std::vector<std::future<void>> fs;
  for (int i = 0; i < 4; ++i)
    fs.push_back(pool.submit([&] {
      {
        std::lock_guard<std::mutex> lock(m);
        ids.insert(std::this_thread::get_id());
      }
      arrived.fetch_add(1);
      while (arrived.load() < 4) std::this_thread::yield();  // all four must run at once
    }));
  for (auto& f : fs) f.get();
  EXPECT_EQ(ids.size(), 4u);
}

TEST(ThreadPool, DestructorFinishesQueuedWork) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) pool.submit([&] { done.fetch_add(1); });
  }
  EXPECT_EQ(done.load(), 100);
}

}  // namespace
}  // namespace sqlrl
