"""/etc/pvgpu/guest.conf (guest-lib/frontend/guestconf.c): where
PVGPU_DEVICES is unset or empty, the guest library takes its backends from
the file (PVGPU_GUEST_CONF names another one for tests); PVGPU_DEVICES,
when set, wins."""


def conf_env(programs, sim_daemon, path, devices=None):
    env = programs.pvgpu_env(sim_daemon.unix)
    env.pop("PVGPU_DEVICES")
    if devices is not None:
        env["PVGPU_DEVICES"] = devices
    env["PVGPU_GUEST_CONF"] = str(path)
    return env


def test_guest_conf_names_the_backend(programs, sim_daemon, short_tmp):
    conf = short_tmp / "guest.conf"
    conf.write_text("# the test's pvgpud\n\n  " + sim_daemon.unix + "   # trailing comment\n")
    res = programs.run("devices", conf_env(programs, sim_daemon, conf), timeout=60)
    programs.assert_passed(res, sim_daemon)


def test_pvgpu_devices_wins_over_guest_conf(programs, sim_daemon, short_tmp):
    conf = short_tmp / "guest.conf"
    conf.write_text("unix:///nonexistent/pvgpu.sock\n")
    env = conf_env(programs, sim_daemon, conf, devices=sim_daemon.unix)
    programs.assert_passed(programs.run("devices", env, timeout=60), sim_daemon)
    env = conf_env(programs, sim_daemon, conf)   # the file alone: nobody there
    res = programs.run("devices", env, timeout=60)
    assert res.returncode == 1 and "cudaErrorNoDevice" in res.stdout, programs.describe(res)
