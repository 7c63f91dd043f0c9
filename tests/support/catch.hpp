// Catch2 v2/v3 compatibility: test sources include this header only, so the same
// files build against Debian's Catch2 2.13 and upstream Catch2 3.x.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#else
#include <catch2/catch.hpp>
#endif
