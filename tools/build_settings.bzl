"""Command-line build settings (Bazel 4.2.3 has no bazel_skylib offline).

    bool_flag(name = "cuda", build_setting_default = False)
    --//tools/config:cuda=true
"""

BuildSettingInfo = provider(
    doc = "The value of a build setting.",
    fields = {"value": "the flag's value"},
)

def _impl(ctx):
    return [BuildSettingInfo(value = ctx.build_setting_value)]

bool_flag = rule(
    implementation = _impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean command-line flag; read it with config_setting(flag_values=...).",
)

string_flag = rule(
    implementation = _impl,
    build_setting = config.string(flag = True),
    doc = "A string command-line flag; read its value through BuildSettingInfo.",
)
