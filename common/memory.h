#pragma once
// How much memory a model or an input would take, weighed against the machine's before anything
// is allocated: sizes come from files and options, so a wrong one must be refused with the amount
// it would need instead of taking the machine down (or wrapping around to a negative size).
#include <cstdint>
#include <initializer_list>
#include <string>

namespace vitk {

// Saturating arithmetic for byte counts: UINT64_MAX stands for "more than any machine has".
uint64_t sat_mul(uint64_t a, uint64_t b);
uint64_t sat_add(uint64_t a, uint64_t b);
// Of non-negative int64 factors (negative ones count as 0).
uint64_t sat_product(std::initializer_list<int64_t> factors);

// The machine's physical memory (sysconf), or UINT64_MAX when it cannot be told.
uint64_t machine_memory_bytes();

// "512 MiB", "27.9 GiB", "more than 16 EiB".
std::string bytes_text(uint64_t bytes);

// "" when `bytes` fit the machine's memory; otherwise "needs at least 27.9 GiB (29999999999
// bytes), more than the 23.4 GiB of memory this machine has", for a message that says first what
// needs it (the option or the configuration key).
std::string memory_shortfall(uint64_t bytes);

}  // namespace vitk
