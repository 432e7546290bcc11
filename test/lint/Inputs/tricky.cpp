// clang-format off
// What the size scanner must see through (check-sizes.test): braces in
// comments, literals and preprocessor lines; { } ( ) here count for nothing.
/* a block comment { with a brace
   over lines } */
#include <string>
#define OPEN {
#define MULTI(x) \
  { x; }

namespace outer {
namespace {
int plain(int a) {
  const char *s = "}}} \" {";
  char c = '{', d = '\'', e = '"';
  const char *raw = R"x(a )" } { " )x";
  const char *raw2 = u8R"( } )";
  long n = 1'000'000;  // a digit separator, not a char literal '{'
  long m = 1'0; char k = '}'; /* { unbalanced, in a comment */
  auto lambda = [](int x) {
    return x + 1;
  };
  return a + c + d + e + n + m + k + lambda(1) + (s != raw) + (raw != raw2);
}
} // namespace

struct Point {
  int x{0};
  int y = int{1};
  Point() : x{1}, y(2) {
  }
  explicit Point(int v)
      : x(v),
        y{v} {
    x += 1;
  }
  bool operator==(const Point &o) const { return x == o.x; }
  int operator()(int a) const noexcept(true) { return a; }
  explicit operator bool() const { return x != 0; }
  auto sum() const -> int {
    return x + y;
  }
public:
  struct Inner {
    int get() { return 3; }
  };
private:
  int hidden() const & { return 4; }
};

enum class Colour : int { Red = 1, Green = (2 << 1) };
int table[] = {1, 2, 3};

template <typename T, int N = 3>
T twice(T v) __attribute__((noinline)) {
  struct Local {
    int f() { return 1; }
  };
  return v + v;
}

auto topLambda = [](int x) {
  return x * 2;
};

int Point_free(Point p) { return p.x; }
} // namespace outer

extern "C" {
int c_entry(void) {
#if 0
  {
#endif
  return 0;
}
}

int outer_defined() try {
  return 1;
} catch (...) {
  return 2;
}

MACRO_WITHOUT_SEMICOLON(Thing)
class AfterMacro : public Base<decltype(f())> {
  void member() {}
};
