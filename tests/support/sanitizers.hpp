// Which sanitizer this test build runs under, for the few tests whose subject a sanitizer
// changes: GCC says so with __SANITIZE_*__, Clang only through __has_feature.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define DSH_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DSH_TEST_UNDER_ASAN 1
#endif
#endif
#ifndef DSH_TEST_UNDER_ASAN
#define DSH_TEST_UNDER_ASAN 0
#endif

// ThreadSanitizer also keeps a thread of its own in every process, forked children too.
#if defined(__SANITIZE_THREAD__)
#define DSH_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DSH_TEST_UNDER_TSAN 1
#endif
#endif
#ifndef DSH_TEST_UNDER_TSAN
#define DSH_TEST_UNDER_TSAN 0
#endif
