// A fixture for scripts/check-op-switches (the ctest op_switches_fixture): the
// first switch over core::Op hides its missing cases behind `default:` and
// must be reported; the nested switch over another enum, the comment and the
// string below must not be.
namespace quire::core {
enum class Op { Neg, Exp };
enum class Other { A, B };

int arity(Op op, Other other) {
  switch (op) {
    case Op::Neg: {
      switch (other) {  // over another enum: a default is fine here
        case Other::A:
          return 1;
        default:
          return 2;
      }
    }
    default:
      return 3;  // the hidden case: must be reported
  }
}

int listed(Op op) {
  // default: (in a comment)
  switch (op) {
    case Op::Neg:
      return sizeof("default:");
    case Op::Exp:
      return 2;
  }
  return 0;
}
}  // namespace quire::core
