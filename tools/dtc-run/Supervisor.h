//===- Supervisor.h - how `dtc run` starts, watches and ends its ranks -*- C++
//-*-===//
//
// `dtc run` = `dtc-run --launch`: after validating, it starts
//
//   mpirun -np N [--allow-run-as-root] --oversubscribe -x DTC_RUN_STATUS_DIR
//          [placement] [$DTC_MPIRUN_ARGS] dtc-run --guard ARGS... [--threads=T]
//
// in a process group of its own and supervises it:
//   - each `--guard` process (what mpirun starts) runs the real rank as its
//     child and records how it ended (exit status or signal) in the status
//     directory, so a rank killed by SIGKILL or SIGSEGV is reported by name;
//   - ranks leave their own failures (timeouts, MPI errors) and a progress
//     record there (see dtc/runtime/Progress.h); when a rank times out, the
//     records and /proc tell which rank stopped making progress;
//   - mpirun's own messages are held back and summarised in one line when
//     nothing better explains a failure (a missing hostfile, say);
//   - SIGINT/SIGTERM is passed to the ranks as SIGUSR2 through mpirun (which
//     would otherwise kill them at once), so they finish the step and save;
//     a second signal ends the job at once;
//   - at the end no process of the job is left: the supervisor is a child
//     subreaper and kills whatever of the job is still there.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_TOOLS_DTC_RUN_SUPERVISOR_H
#define DTC_TOOLS_DTC_RUN_SUPERVISOR_H

#include <cstdint>
#include <string>
#include <vector>

/// Signals closer together than this count as one: a wrapper (timeout, a
/// shell) often passes on the signal its process group already delivered.
constexpr int64_t kRepeatedSignalNs = 500000000;

/// What a second signal during a checkpoint's save prints (the supervisor's
/// and a rank's own handler alike), and the error line after a third.
constexpr const char *kWaitingForSaveNotice =
    "dtc-run: saving the checkpoint, then stopping; a third signal stops at "
    "once and keeps the previous checkpoint\n";
constexpr const char *kAbortedSaveMessage =
    "interrupted three times: stopped during the save; the checkpoint on "
    "disk is the previous one";

/// `dtc-run --launch`, after validation: starts mpirun with `mpirunArgs`
/// after the supervisor's own, each rank with this program's arguments (less
/// --launch) and `rankArgs`; returns the exit status.
/// Installs the launcher's handlers for SIGINT, SIGTERM and SIGHUP at once,
/// before the launch is checked: a signal then is kept and treated, when
/// the job starts, as if it came during the run (the ranks stop before
/// their first step and save).
void catchLaunchSignals();

/// `dtc run` blocks SIGINT, SIGTERM and SIGHUP until this process has its
/// handlers; unblocking delivers one that came meanwhile.
void unblockStopSignals();

int superviseLaunch(int64_t devices, const std::vector<std::string> &mpirunArgs,
                    const std::vector<std::string> &rankArgs, int argc,
                    char **argv);

/// `dtc-run --guard ARGS`: runs `dtc-run ARGS` as a child, forwards signals
/// to it and records how it ended. Returns its exit status (128 + signal
/// when it was killed).
int guardRank(int argc, char **argv);

#endif
