"""Offline stand-in for rules_cc: the cc_* rules built into Bazel 4.2.3.

Bazel 4.2.3's @bazel_tools loads @rules_cc, which it would otherwise download,
and Debian's bazel-rules-cc package is too new for it. BUILD files load these
names exactly as they would from the real rules_cc (which MODULE.bazel uses).
"""

cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
objc_library = native.objc_library
