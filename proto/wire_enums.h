// The region enums on the wire (memd.proto) are the C++ ones (region/region.h)
// number for number; the static_asserts below pin them, and the calls here
// are the only conversions between them. From the wire, a number goes
// through discipline_from_number / method_from_number, which refuse one
// that names nothing.
#pragma once

#include "region/region.h"
#include "memd/v1/memd.pb.h"

namespace memd {

static_assert(v1::DISCIPLINE_UNSPECIFIED == 0);
static_assert(v1::DISCIPLINE_SHM == static_cast<int>(Discipline::kShm));
static_assert(v1::DISCIPLINE_FILE == static_cast<int>(Discipline::kFile));
static_assert(v1::DISCIPLINE_PMEM == static_cast<int>(Discipline::kPmem));
static_assert(v1::Discipline_MAX == static_cast<int>(Discipline::kPmem), "a discipline on the wire only");
static_assert(v1::METHOD_UNSPECIFIED == 0);
static_assert(v1::METHOD_BEST == static_cast<int>(Method::kBest));
static_assert(v1::METHOD_POOL == static_cast<int>(Method::kPool));
static_assert(v1::METHOD_LAST == static_cast<int>(Method::kLast));
static_assert(v1::METHOD_DEBUG == static_cast<int>(Method::kDebug));
static_assert(v1::METHOD_PROFILE == static_cast<int>(Method::kProfile));
static_assert(v1::Method_MAX == static_cast<int>(Method::kProfile), "a method on the wire only");

inline v1::Discipline to_wire(Discipline d) { return static_cast<v1::Discipline>(d); }
inline v1::Method to_wire(Method m) { return static_cast<v1::Method>(m); }

}  // namespace memd
