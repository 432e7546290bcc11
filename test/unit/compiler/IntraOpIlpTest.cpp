// The intra-op integer program against answers known without it: every
// assignment of small random graphs (with and without a binding memory
// budget), and a dynamic program on chains too long to enumerate.
#include "dtc/Planner/IntraOpIlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

using dtc::planner::enumerateIntraOp;
using dtc::planner::IntraOpProblem;
using dtc::planner::IntraOpSolution;
using dtc::planner::solveIntraOp;

namespace {

IntraOpProblem randomProblem(std::mt19937 &rng, int nodes, double edgeChance) {
  std::uniform_int_distribution<int> strategies(1, 4);
  std::uniform_real_distribution<double> cost(0, 10), memory(1, 100),
      chance(0, 1);
  IntraOpProblem p;
  for (int v = 0; v < nodes; ++v) {
    int k = strategies(rng);
    std::vector<double> c(k), m(k);
    for (int s = 0; s < k; ++s) {
      c[s] = cost(rng);
      m[s] = memory(rng);
    }
    p.addNode("n" + std::to_string(v), c, m);
  }
  for (int u = 0; u < nodes; ++u)
    for (int v = u + 1; v < nodes; ++v)
      if (chance(rng) < edgeChance) {
        std::vector<double> r(p.nodes[u].cost.size() * p.nodes[v].cost.size());
        for (double &x : r)
          x = chance(rng) < 0.3 ? 0 : cost(rng);
        p.addEdge(u, v, r);
      }
  return p;
}

void expectSame(const IntraOpProblem &p, const IntraOpSolution &ilp,
                const IntraOpSolution &all, const std::string &what) {
  ASSERT_EQ(ilp.feasible, all.feasible) << what;
  if (!all.feasible)
    return;
  EXPECT_TRUE(ilp.optimal) << what;
  EXPECT_NEAR(ilp.objective, all.objective, 1e-6 * (1 + all.objective)) << what;
  // The reported numbers are the returned assignment's own.
  EXPECT_DOUBLE_EQ(ilp.objective, p.objectiveOf(ilp.choice)) << what;
  EXPECT_LE(ilp.memory, p.memoryBudget * (1 + 1e-9) + 1e-9) << what;
}

} // namespace

TEST(IntraOpIlp, SmallGraphsMatchEveryAssignment) {
  std::mt19937 rng(20261127);
  for (int trial = 0; trial < 150; ++trial) {
    IntraOpProblem p = randomProblem(rng, 2 + trial % 6, 0.5);
    ASSERT_EQ(p.check(), "");
    IntraOpSolution all = enumerateIntraOp(p);
    IntraOpSolution ilp = solveIntraOp(p);
    expectSame(p, ilp, all, "trial " + std::to_string(trial));
  }
}

TEST(IntraOpIlp, MemoryBudgetBindsAsInEveryAssignment) {
  std::mt19937 rng(7);
  int changed = 0;
  for (int trial = 0; trial < 150; ++trial) {
    IntraOpProblem p = randomProblem(rng, 3 + trial % 5, 0.6);
    IntraOpSolution free = enumerateIntraOp(p);
    // A budget between the least memory any assignment needs and the
    // unconstrained optimum's, so it excludes that optimum.
    double least = 0;
    for (const auto &n : p.nodes)
      least += *std::min_element(n.memory.begin(), n.memory.end());
    p.memoryBudget = least + (free.memory - least) * (trial % 3) / 3.0;
    IntraOpSolution all = enumerateIntraOp(p);
    IntraOpSolution ilp = solveIntraOp(p);
    expectSame(p, ilp, all, "trial " + std::to_string(trial));
    changed += all.objective > free.objective + 1e-9;
  }
  // The budgets were meant to bind: most of them must have cost something.
  EXPECT_GT(changed, 75);
}

TEST(IntraOpIlp, BudgetBelowEveryAssignmentIsInfeasible) {
  IntraOpProblem p;
  p.addNode("a", {1, 2}, {10, 5});
  p.addNode("b", {1, 1}, {8, 4});
  p.addEdge(0, 1, {0, 3, 3, 0});
  p.memoryBudget = 8.5;
  EXPECT_FALSE(solveIntraOp(p).feasible);
  EXPECT_FALSE(enumerateIntraOp(p).feasible);
  p.memoryBudget = 9; // exactly the smallest assignment
  IntraOpSolution fit = solveIntraOp(p);
  ASSERT_TRUE(fit.feasible);
  EXPECT_EQ(fit.choice, (std::vector<int>{1, 1}));
  EXPECT_DOUBLE_EQ(fit.objective, 3);
}

// Megatron's MLP as the program sees it, with hand-computed costs (an
// all-reduce costs 2, a gather 1): each matmul replicated (compute 4),
// column-split (compute 1, all-reduce its input's gradient) or row-split
// (compute 1, all-reduce its output; fc1's whole input is sliced, so its
// gradient is gathered, 0.5); column then row meets without resharding.
TEST(IntraOpIlp, ColumnThenRowIsMegatronsMlp) {
  IntraOpProblem p;
  // strategies: 0 replicated, 1 column (output split), 2 row (input split)
  p.addNode("fc1", {4, 3, 3.5}, {4, 1, 1});
  p.addNode("fc2", {4, 3, 3}, {4, 1, 1});
  // Output layout of fc1 (whole, split, whole after its all-reduce)
  // against the input fc2 needs (whole, whole, split): a gather costs 1, a
  // slice nothing forward and a gather of the gradient backward (0.5).
  p.addEdge(0, 1, {0, 0, 0.5, 1, 1, 0, 0, 0, 0.5});
  IntraOpSolution ilp = solveIntraOp(p);
  ASSERT_TRUE(ilp.optimal);
  EXPECT_EQ(ilp.choice, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(ilp.objective, 6);
  EXPECT_EQ(enumerateIntraOp(p).choice, ilp.choice);
}

TEST(IntraOpIlp, LongChainsMatchTheirDynamicProgram) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> cost(0, 10);
  for (int length : {50, 300}) {
    IntraOpProblem p;
    for (int v = 0; v < length; ++v) {
      std::vector<double> c(4);
      for (double &x : c)
        x = cost(rng);
      p.addNode("c" + std::to_string(v), c, std::vector<double>(4, 1));
      if (v > 0) {
        std::vector<double> r(16);
        for (double &x : r)
          x = cost(rng);
        p.addEdge(v - 1, v, r);
      }
    }
    std::vector<double> best = p.nodes[0].cost;
    for (int v = 1; v < length; ++v) {
      std::vector<double> next(4);
      for (int t = 0; t < 4; ++t) {
        double b = 1e300;
        for (int s = 0; s < 4; ++s)
          b = std::min(b, best[s] + p.edges[v - 1].cost[s * 4 + t]);
        next[t] = b + p.nodes[v].cost[t];
      }
      best = next;
    }
    IntraOpSolution ilp = solveIntraOp(p);
    ASSERT_TRUE(ilp.optimal) << length;
    EXPECT_NEAR(ilp.objective, *std::min_element(best.begin(), best.end()),
                1e-6 * ilp.objective)
        << length;
  }
}

TEST(IntraOpIlp, MalformedProblemsAreNamed) {
  IntraOpProblem p;
  p.addNode("a", {1, 2}, {1});
  EXPECT_NE(p.check().find("node 0 (a) has 2 costs and 1 memories"),
            std::string::npos);
  p.nodes[0].memory = {1, 1};
  p.addNode("b", {1}, {1});
  p.addEdge(0, 1, {1, 2, 3});
  EXPECT_NE(p.check().find("edge 0 has 3 costs"), std::string::npos);
  p.edges[0].cost = {1, -2};
  EXPECT_NE(p.check().find("negative"), std::string::npos);
  p.edges[0].cost = {1, 2};
  EXPECT_EQ(p.check(), "");
}
