//===- Commands.h - dtc's subcommands beside dtc.cpp -------------*- C++
//-*-===//
#ifndef DTC_TOOLS_DTC_COMMANDS_H
#define DTC_TOOLS_DTC_COMMANDS_H

#include <string>
#include <vector>

/// Prints "dtc: error: MESSAGE" on stderr; returns the exit status 1.
int fail(const std::string &message);

/// The path of tool `name` next to this dtc.
std::string siblingTool(const char *argv0, const std::string &name);

/// Replaces this process with `tool` run with `args` (args[0] is its
/// name); returns (after an error line) only if it cannot start.
int execTool(const std::string &tool, std::vector<std::string> args);

/// dtc calibrate [--ranks LIST] [-o FILE] (Calibrate.cpp).
int calibrateCommand(const char *argv0, const std::vector<std::string> &args);

/// dtc inspect OUT.dtc [--summary] (Inspect.cpp).
int inspectCommand(const std::vector<std::string> &args);

/// dtc eval OUT.dtc --data FILE [--load CKPT] (Eval.cpp).
int evalCommand(const char *argv0, const std::vector<std::string> &args);

#endif // DTC_TOOLS_DTC_COMMANDS_H
