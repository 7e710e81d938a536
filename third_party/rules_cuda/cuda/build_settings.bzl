"""Command-line build settings (bazel_skylib cannot be fetched here)."""

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
