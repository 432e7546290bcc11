//===- IntraOpIlp.cpp - Alpa's intra-operator integer program, with CBC ---===//
#include "dtc/Planner/IntraOpIlp.h"

#include <Cbc_C_Interface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>

namespace dtc::planner {

int IntraOpProblem::addNode(std::string name, std::vector<double> cost,
                            std::vector<double> memory) {
  nodes.push_back({std::move(name), std::move(cost), std::move(memory)});
  return static_cast<int>(nodes.size()) - 1;
}

void IntraOpProblem::addEdge(int from, int to, std::vector<double> cost) {
  edges.push_back({from, to, std::move(cost)});
}

std::string IntraOpProblem::check() const {
  std::ostringstream why;
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &n = nodes[i];
    if (n.cost.empty() || n.cost.size() != n.memory.size()) {
      why << "node " << i << " (" << n.name << ") has " << n.cost.size()
          << " costs and " << n.memory.size() << " memories";
      return why.str();
    }
    if (std::any_of(n.cost.begin(), n.cost.end(), bad) ||
        std::any_of(n.memory.begin(), n.memory.end(), bad)) {
      why << "node " << i << " (" << n.name
          << ") has a negative or non-finite cost or memory";
      return why.str();
    }
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge &e = edges[i];
    const int count = static_cast<int>(nodes.size());
    if (e.from < 0 || e.from >= count || e.to < 0 || e.to >= count ||
        e.from == e.to) {
      why << "edge " << i << " joins " << e.from << " and " << e.to << " of "
          << count << " nodes";
      return why.str();
    }
    if (e.cost.size() != nodes[e.from].cost.size() * nodes[e.to].cost.size() ||
        std::any_of(e.cost.begin(), e.cost.end(), bad)) {
      why << "edge " << i << " has " << e.cost.size()
          << " costs (or a negative one) for "
          << nodes[e.from].cost.size() * nodes[e.to].cost.size() << " pairs";
      return why.str();
    }
  }
  if (std::isnan(memoryBudget) || memoryBudget < 0)
    return "the memory budget is negative or NaN";
  return {};
}

double IntraOpProblem::objectiveOf(const std::vector<int> &choice) const {
  double total = 0;
  for (size_t v = 0; v < nodes.size(); ++v)
    total += nodes[v].cost[choice[v]];
  for (const Edge &e : edges)
    total += e.cost[choice[e.from] * nodes[e.to].cost.size() + choice[e.to]];
  return total;
}

double IntraOpProblem::memoryOf(const std::vector<int> &choice) const {
  double total = 0;
  for (size_t v = 0; v < nodes.size(); ++v)
    total += nodes[v].memory[choice[v]];
  return total;
}

namespace {

/// The budget with a relative slack, so an assignment exactly at the budget
/// counts as fitting in both the solver (whose tolerances are relative) and
/// the enumeration.
bool fits(double memory, double budget) {
  return memory <= budget * (1 + 1e-9) + 1e-9;
}

struct CbcModel {
  Cbc_Model *model = Cbc_newModel();
  ~CbcModel() { Cbc_deleteModel(model); }
};

/// Gives CBC the least-memory assignment (feasible whenever any is) as a
/// start to prune against: `firstColumn` and `edgeColumn` (-1: none) are
/// each node's and edge's first column.
void setLeastMemoryStart(Cbc_Model *model, const IntraOpProblem &problem,
                         const std::vector<int> &firstColumn,
                         const std::vector<int> &edgeColumn) {
  const int nodeCount = static_cast<int>(problem.nodes.size());
  std::vector<int> leastMemory(nodeCount);
  for (int v = 0; v < nodeCount; ++v) {
    const std::vector<double> &memory = problem.nodes[v].memory;
    leastMemory[v] =
        int(std::min_element(memory.begin(), memory.end()) - memory.begin());
  }
  if (!fits(problem.memoryOf(leastMemory), problem.memoryBudget))
    return;
  std::vector<int> startColumns;
  std::vector<double> startValues;
  for (int v = 0; v < nodeCount; ++v)
    for (size_t s = 0; s < problem.nodes[v].cost.size(); ++s) {
      startColumns.push_back(firstColumn[v] + int(s));
      startValues.push_back(int(s) == leastMemory[v] ? 1 : 0);
    }
  for (size_t index = 0; index < problem.edges.size(); ++index) {
    if (edgeColumn[index] < 0)
      continue;
    const IntraOpProblem::Edge &e = problem.edges[index];
    const size_t to = problem.nodes[e.to].cost.size();
    const size_t chosen =
        size_t(leastMemory[e.from]) * to + size_t(leastMemory[e.to]);
    for (size_t k = 0; k < problem.nodes[e.from].cost.size() * to; ++k) {
      startColumns.push_back(edgeColumn[index] + int(k));
      startValues.push_back(k == chosen ? 1 : 0);
    }
  }
  Cbc_setMIPStartI(model, int(startColumns.size()), startColumns.data(),
                   startValues.data());
}

} // namespace

IntraOpSolution solveIntraOp(const IntraOpProblem &problem,
                             double timeLimitSeconds) {
  const auto start = std::chrono::steady_clock::now();
  IntraOpSolution solution;
  const int nodeCount = static_cast<int>(problem.nodes.size());
  if (nodeCount == 0) {
    solution.feasible = solution.optimal = true;
    return solution;
  }
  // Objective coefficients scaled to at most 1e3, so the solver's absolute
  // tolerances sit far below the differences between strategies.
  double largest = 0;
  for (const auto &n : problem.nodes)
    for (double c : n.cost)
      largest = std::max(largest, c);
  for (const auto &e : problem.edges)
    for (double c : e.cost)
      largest = std::max(largest, c);
  const double scale = largest > 0 ? 1e3 / largest : 1;
  const bool budgeted = std::isfinite(problem.memoryBudget);
  double largestMemory = 0;
  for (const auto &n : problem.nodes)
    for (double m : n.memory)
      largestMemory = std::max(largestMemory, m);
  const double memoryScale =
      budgeted && largestMemory > 0 ? 1.0 / largestMemory : 1;

  CbcModel cbc;
  Cbc_Model *model = cbc.model;
  Cbc_setLogLevel(model, 0);
  Cbc_setMaximumSeconds(model, timeLimitSeconds);
  Cbc_setParameter(model, "allowableGap", "1e-9");
  Cbc_setParameter(model, "ratioGap", "0");
  Cbc_setParameter(model, "preprocess", "off");

  // x[v][s] columns first, node by node.
  std::vector<int> firstColumn(nodeCount);
  int columns = 0;
  for (int v = 0; v < nodeCount; ++v) {
    firstColumn[v] = columns;
    const auto &node = problem.nodes[v];
    for (size_t s = 0; s < node.cost.size(); ++s, ++columns)
      Cbc_addCol(model, "", 0, 1, node.cost[s] * scale, 1, 0, nullptr, nullptr);
  }
  std::vector<int> cols;
  std::vector<double> coefs;
  auto addRow = [&](char sense, double rhs) {
    Cbc_addRow(model, "", static_cast<int>(cols.size()), cols.data(),
               coefs.data(), sense, rhs);
    cols.clear();
    coefs.clear();
    ++solution.constraints;
  };
  for (int v = 0; v < nodeCount; ++v) {
    for (size_t s = 0; s < problem.nodes[v].cost.size(); ++s) {
      cols.push_back(firstColumn[v] + static_cast<int>(s));
      coefs.push_back(1);
    }
    addRow('E', 1);
  }
  std::vector<int> edgeColumn(problem.edges.size(), -1);
  for (size_t index = 0; index < problem.edges.size(); ++index) {
    const IntraOpProblem::Edge &e = problem.edges[index];
    const size_t from = problem.nodes[e.from].cost.size();
    const size_t to = problem.nodes[e.to].cost.size();
    // An edge that costs nothing whatever the ends choose adds nothing.
    if (std::all_of(e.cost.begin(), e.cost.end(),
                    [](double c) { return c == 0; }))
      continue;
    const int first = columns;
    edgeColumn[index] = first;
    for (size_t k = 0; k < from * to; ++k, ++columns)
      Cbc_addCol(model, "", 0, 1, e.cost[k] * scale, 0, 0, nullptr, nullptr);
    for (size_t s = 0; s < from; ++s) {
      for (size_t t = 0; t < to; ++t) {
        cols.push_back(first + static_cast<int>(s * to + t));
        coefs.push_back(1);
      }
      cols.push_back(firstColumn[e.from] + static_cast<int>(s));
      coefs.push_back(-1);
      addRow('E', 0);
    }
    for (size_t t = 0; t < to; ++t) {
      for (size_t s = 0; s < from; ++s) {
        cols.push_back(first + static_cast<int>(s * to + t));
        coefs.push_back(1);
      }
      cols.push_back(firstColumn[e.to] + static_cast<int>(t));
      coefs.push_back(-1);
      addRow('E', 0);
    }
  }
  if (budgeted) {
    for (int v = 0; v < nodeCount; ++v)
      for (size_t s = 0; s < problem.nodes[v].memory.size(); ++s) {
        cols.push_back(firstColumn[v] + static_cast<int>(s));
        coefs.push_back(problem.nodes[v].memory[s] * memoryScale);
      }
    addRow('L', problem.memoryBudget * memoryScale * (1 + 1e-9) + 1e-9);
  }
  solution.variables = columns;
  // A budget that binds leaves the solver branching on the knapsack row
  // with no assignment in hand: the least-memory one is a start.
  if (budgeted)
    setLeastMemoryStart(model, problem, firstColumn, edgeColumn);
  Cbc_solve(model);
  solution.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (Cbc_isProvenInfeasible(model))
    return solution;
  const double *values = Cbc_getColSolution(model);
  if (!values)
    return solution;
  solution.choice.assign(nodeCount, 0);
  for (int v = 0; v < nodeCount; ++v) {
    const size_t count = problem.nodes[v].cost.size();
    size_t best = 0;
    for (size_t s = 1; s < count; ++s)
      if (values[firstColumn[v] + s] > values[firstColumn[v] + best])
        best = s;
    solution.choice[v] = static_cast<int>(best);
  }
  solution.objective = problem.objectiveOf(solution.choice);
  solution.memory = problem.memoryOf(solution.choice);
  solution.feasible = fits(solution.memory, problem.memoryBudget);
  solution.optimal = solution.feasible && Cbc_isProvenOptimal(model);
  if (!solution.feasible)
    solution.choice.clear();
  return solution;
}

IntraOpSolution enumerateIntraOp(const IntraOpProblem &problem,
                                 int64_t maxAssignments) {
  const auto start = std::chrono::steady_clock::now();
  IntraOpSolution best;
  const size_t nodeCount = problem.nodes.size();
  double assignments = 1;
  for (const auto &n : problem.nodes)
    assignments *= static_cast<double>(n.cost.size());
  if (assignments > static_cast<double>(maxAssignments))
    return best;
  std::vector<int> choice(nodeCount, 0);
  while (true) {
    double memory = problem.memoryOf(choice);
    if (fits(memory, problem.memoryBudget)) {
      double objective = problem.objectiveOf(choice);
      if (!best.feasible || objective < best.objective) {
        best.feasible = true;
        best.choice = choice;
        best.objective = objective;
        best.memory = memory;
      }
    }
    size_t v = 0;
    while (v < nodeCount &&
           ++choice[v] == static_cast<int>(problem.nodes[v].cost.size()))
      choice[v++] = 0;
    if (v == nodeCount)
      break;
  }
  best.optimal = best.feasible;
  best.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return best;
}

} // namespace dtc::planner
