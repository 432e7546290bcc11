//===- IntraOpIlp.h - choosing one strategy per op by integer program -*- C++
//-*-===//
//
// Alpa's intra-operator problem, free of MLIR: a graph whose nodes each pick
// one of their strategies (a way to shard the op), with a cost per strategy
// (its compute and the communication it implies), a resharding cost per
// edge for every pair of the two ends' strategies, and a per-device memory
// per strategy under one budget. Minimise the total cost.
//
// The program (Zheng et al., OSDI'22, section 4.2): a binary x[v][s] per node
// and strategy with sum_s x[v][s] = 1; per edge (u, v) a continuous
// y[s][t] >= 0 with sum_t y[s][t] = x[u][s] and sum_s y[s][t] = x[v][t], so
// that once the x are integral y is their product and sum y[s][t] R[s][t] is
// the edge's resharding cost; sum_v sum_s mem[v][s] x[v][s] <= budget.
// Solved with COIN-OR CBC. `enumerateIntraOp` tries every assignment, for
// tests and for graphs too small to need a solver.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_PLANNER_INTRAOPILP_H
#define DTC_PLANNER_INTRAOPILP_H

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dtc::planner {

struct IntraOpProblem {
  struct Node {
    std::string name;
    /// Per strategy: its cost (seconds) and the bytes it keeps per device.
    std::vector<double> cost, memory;
  };
  struct Edge {
    int from = 0, to = 0;
    /// Row-major [strategies of from][strategies of to].
    std::vector<double> cost;
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  double memoryBudget = std::numeric_limits<double>::infinity();

  int addNode(std::string name, std::vector<double> cost,
              std::vector<double> memory);
  void addEdge(int from, int to, std::vector<double> cost);
  /// Empty when the sizes agree (every node has a strategy, cost and
  /// memory alike in length, edges name nodes and have |from| x |to|
  /// costs, all finite and non-negative); otherwise what is wrong.
  std::string check() const;
  /// Cost and memory of one strategy per node.
  double objectiveOf(const std::vector<int> &choice) const;
  double memoryOf(const std::vector<int> &choice) const;
};

struct IntraOpSolution {
  /// False when no assignment fits the memory budget.
  bool feasible = false;
  /// False when the time limit stopped the solver before it proved the
  /// assignment optimal (the best one found is returned).
  bool optimal = false;
  std::vector<int> choice;
  double objective = 0, memory = 0;
  /// Variables and constraints of the program CBC solved (0 for the
  /// enumeration).
  int64_t variables = 0, constraints = 0;
  double seconds = 0;
};

/// Solves `problem` (which must pass check()) with CBC, stopping after
/// `timeLimitSeconds`.
IntraOpSolution solveIntraOp(const IntraOpProblem &problem,
                             double timeLimitSeconds = 30);
/// Every assignment in turn; refuses (returns infeasible with an empty
/// choice) problems of more than `maxAssignments` assignments.
IntraOpSolution enumerateIntraOp(const IntraOpProblem &problem,
                                 int64_t maxAssignments = 1 << 22);

} // namespace dtc::planner

#endif // DTC_PLANNER_INTRAOPILP_H
