// tools/gpu_skip.h: a GPU test without a GPU reports its GPU part skipped in
// test.xml (before, such tests exited 0 and counted as passed).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/gpu_skip.h"

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

std::string read(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

}  // namespace

int main() {
  // Bazel's own XML_OUTPUT_FILE is this test's result: write the skip report elsewhere.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/skip.xml";
  setenv("XML_OUTPUT_FILE", path.c_str(), 1);
  expect(gpu_skip("example_gpu_test", "cudaErrorNoDevice") == 0, "gpu_skip returns 0");
  unsetenv("XML_OUTPUT_FILE");
  const std::string xml = read(path);
  expect(xml.find("<testcase name=\"links_and_loads_the_cuda_runtime\" classname=\"example_gpu_test\"/>") !=
             std::string::npos, "the runtime check is a passed case");
  expect(xml.find("<testcase name=\"runs_on_a_gpu\" classname=\"example_gpu_test\">"
                  "<skipped message=\"cudaErrorNoDevice\"/></testcase>") != std::string::npos,
         "the GPU part is a skipped case naming why");
  expect(xml.find("tests=\"2\" skipped=\"1\"") != std::string::npos, "the suite counts one skip");
  expect(gpu_skip("run_by_hand", "no XML_OUTPUT_FILE") == 0, "run by hand, it only prints");
  return failures == 0 ? 0 : 1;
}
