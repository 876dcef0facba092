// llm_sqlrl: one binary, one subcommand per job.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "app/commands.h"
#include "app/launch.h"
#include "app/options.h"
#include "runtime/blas_core.h"
#include "runtime/error.h"
#include "runtime/gemm.h"
#include "sql/exec/sandbox.h"

int main(int argc, char** argv) {
  // A SQL sandbox worker (sql/exec/sandbox.h), started by this same binary's pools.
  if (argc == 4 && std::strcmp(argv[1], "--sql-worker") == 0)
    return sqlrl::sql::sql_worker_main(std::atoi(argv[2]), std::atoi(argv[3]));
  sqlrl::sql::register_sql_worker_binary("/proc/self/exe");
  // Past `ulimit -f`, a write raises SIGXFSZ, whose default action kills the process without a
  // word. Ignored, the write fails with EFBIG instead: the one-line error names the file, and a
  // checkpoint being written is removed (the previous one stays).
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    sqlrl::choose_cpu_kernels(argc, argv);  // may start this program again (runtime/blas_core.h)
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  sqlrl::quiet_blas_threads();  // before any GEMM (runtime/gemm.h)
  CLI::App app{"llm_sqlrl: multi-turn text-to-SQL agents trained with GRPO, from Hugging Face Qwen weights"};
  app.require_subcommand(1);
  // Read by choose_cpu_kernels above, before the parse; declared here so that every command
  // accepts it (fallthrough: a command passes the options it does not know to this level).
  std::string cpu_kernels = "fast";
  std::vector<std::string> cpu_kernel_names;
  for (const sqlrl::CpuKernelsMode& m : sqlrl::cpu_kernel_modes()) cpu_kernel_names.push_back(m.name);
  app.add_option("--cpu-kernels", cpu_kernels, sqlrl::cpu_kernels_help())
      ->check(CLI::IsMember(cpu_kernel_names))
      ->capture_default_str();
  app.fallthrough();
  app.set_version_flag("--version", "llm_sqlrl 0.1");
  sqlrl::add_info_command(app);
  sqlrl::add_train_command(app);
  sqlrl::add_sql_command(app);
  sqlrl::add_tokenize_command(app);
  sqlrl::add_inspect_command(app);
  sqlrl::add_eval_sql_command(app);
  sqlrl::add_data_command(app);
  sqlrl::add_generate_command(app);
  sqlrl::add_plan_command(app);
  sqlrl::add_init_command(app);
  sqlrl::add_sft_command(app);
  sqlrl::add_eval_command(app);
  sqlrl::add_demo_command(app);
  sqlrl::add_report_command(app);
  sqlrl::add_merge_command(app);
  try {
    sqlrl::refuse_old_spellings(argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // What std::bad_alloc says ("std::bad_alloc") names neither the cause nor a way out.
    const char* what = dynamic_cast<const std::bad_alloc*>(&e)
                           ? "out of memory: a buffer larger than this machine can hold was asked for (a size "
                             "setting too large for it, or an input larger than it can hold)"
                           : e.what();
    // In a job of several processes every rank's error names its rank, and the whole job ends
    // (the others may be waiting on this one in a collective).
    const sqlrl::Comm* job = sqlrl::joined_job();
    if (job && job->world_size > 1) {
      std::fprintf(stderr, "error (rank %d of %d): %s\n", job->rank, job->world_size, what);
      std::fflush(stderr);
      sqlrl::comm_abort(*job, 1);
    }
    std::fprintf(stderr, "error: %s\n", what);
    return 1;
  }
  sqlrl::leave_job();
  return 0;
}
