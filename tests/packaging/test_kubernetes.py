#!/usr/bin/env python3
"""The Kubernetes manifests (packaging/kubernetes/*.yaml) against Pod Security "restricted"
(TAP output). There is no cluster here: the pod templates are read with python3-yaml and held
to the rules of the profile as the Pod Security Standards page lists them (baseline's and
restricted's, Kubernetes 1.29 and later), and to what sockferry needs of them.

Usage: test_kubernetes.py MANIFEST...

Per pod template: no host namespaces, host ports, hostPath or other volume types than
restricted allows; no privileged container, procMount, SELinux user/role, AppArmor or seccomp
profile but the allowed ones, no unsafe sysctl; every container (init, sidecar, app) with
allowPrivilegeEscalation false, capabilities drop ALL and nothing added but NET_BIND_SERVICE,
runAsNonRoot true and no uid 0 (pod or container), seccomp RuntimeDefault or Localhost (pod or
every container); and readOnlyRootFilesystem, which restricted does not ask for but these do.
Then: every mount names a volume of the pod, images are named, every sockferry sidecar has a
startup and a liveness probe that checks every forward it was given (check --pid 1, or the same
-c and -F), the ConfigMap it mounts is in the manifest, and no example.* name is left.
"""
import os
import pathlib
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import yaml_module  # noqa: E402

PATHS = [pathlib.Path(p) for p in sys.argv[1:]]

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
VOLUME_SOURCE_KEYS = RESTRICTED_VOLUMES | {"hostPath", "nfs", "iscsi", "gcePersistentDisk", "awsElasticBlockStore",
                                           "gitRepo", "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
                                           "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
                                           "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_templates(docs):
    for d in docs:
        if not isinstance(d, dict):
            continue
        kind = d.get("kind")
        if kind == "Pod":
            yield d["metadata"]["name"], d.get("metadata", {}), d["spec"]
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            t = d["spec"]["template"]
            yield f"{kind}/{d['metadata']['name']}", t.get("metadata", {}), t["spec"]


def containers(spec):
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            yield key, c


def restricted(name, meta, spec):
    """The rules of Pod Security "restricted" (and baseline's), and readOnlyRootFilesystem, for
    one pod template: (holds, what, detail) for each."""
    psc = spec.get("securityContext") or {}
    cs = list(containers(spec))
    yield (cs, f"{name}: has containers")
    # baseline
    yield (not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")),
           f"{name}: no host network, PID or IPC namespace")
    yield (not (psc.get("windowsOptions") or {}).get("hostProcess")
           and not any(((c.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess") for _, c in cs),
           f"{name}: no Windows HostProcess")
    vols = spec.get("volumes") or []
    kinds = [k for v in vols for k in v if k in VOLUME_SOURCE_KEYS]
    yield (set(kinds) <= RESTRICTED_VOLUMES, f"{name}: only the volume types restricted allows (no hostPath)",
           repr(kinds))
    yield (not any(p.get("hostPort") for _, c in cs for p in c.get("ports") or []), f"{name}: no host ports")
    sysctls = [s.get("name") for s in psc.get("sysctls") or []]
    yield (set(sysctls) <= SAFE_SYSCTLS, f"{name}: only safe sysctls", repr(sysctls))
    annotations = meta.get("annotations") or {}
    apparmor = [v for k, v in annotations.items() if k.startswith("container.apparmor.security.beta.kubernetes.io/")]
    apparmor += [(x.get("appArmorProfile") or {}).get("type") for x in [psc] + [c.get("securityContext") or {} for _, c in cs]]
    yield (all(a in (None, "runtime/default", "RuntimeDefault", "Localhost") or str(a).startswith("localhost/")
              for a in apparmor), f"{name}: AppArmor unset, runtime default or localhost", repr(apparmor))

    def each(key, ok, desc):
        bad = [c["name"] for _, c in cs if not ok((c.get("securityContext") or {}).get(key), c)]
        return not bad, f"{name}: {desc}", f"not so in {bad}"

    yield each("privileged", lambda v, c: not v, "no privileged container")
    yield each("procMount", lambda v, c: v in (None, "Default"), "procMount unset or Default")
    for x in [psc] + [c.get("securityContext") or {} for _, c in cs]:
        se = x.get("seLinuxOptions") or {}
        yield (se.get("type") in SELINUX_TYPES and not se.get("user") and not se.get("role"),
               f"{name}: SELinux options allowed", repr(se))
    # restricted
    yield each("allowPrivilegeEscalation", lambda v, c: v is False, "allowPrivilegeEscalation: false in every container")
    yield each("capabilities", lambda v, c: "ALL" in ((v or {}).get("drop") or []), "every container drops ALL capabilities")
    yield each("capabilities", lambda v, c: set((v or {}).get("add") or []) <= {"NET_BIND_SERVICE"},
               "no capability added but NET_BIND_SERVICE")
    nonroot_pod = psc.get("runAsNonRoot") is True
    yield each("runAsNonRoot", lambda v, c: v is True or (nonroot_pod and v is None),
               "runAsNonRoot: true (the pod's or every container's), no container sets false")
    yield (psc.get("runAsUser") != 0, f"{name}: the pod's runAsUser is not 0")
    yield each("runAsUser", lambda v, c: v != 0, "no container runs as uid 0")
    seccomp_ok = lambda p: (p or {}).get("type") in ("RuntimeDefault", "Localhost")
    pod_seccomp = seccomp_ok(psc.get("seccompProfile"))
    yield each("seccompProfile",
               lambda v, c: seccomp_ok(v) or (pod_seccomp and (v is None or v.get("type") != "Unconfined")),
               "seccomp RuntimeDefault or Localhost (the pod's or every container's), none Unconfined")
    # beyond restricted
    yield each("readOnlyRootFilesystem", lambda v, c: v is True, "readOnlyRootFilesystem: true in every container")


def forwards_checked(c):
    """Whether the container's probes check every forward it was given."""
    cmd = (c.get("command") or []) + (c.get("args") or [])
    if cmd[:2] != ["sockferry", "relay"]:
        return None
    given = [a for a in cmd[2:]]
    probes = {p: ((c.get(p) or {}).get("exec") or {}).get("command") for p in ("startupProbe", "livenessProbe")}
    ok = {}
    for p, argv in probes.items():
        if not argv or argv[:2] != ["sockferry", "check"]:
            ok[p] = False
            continue
        rest = argv[2:]
        if "--pid" in rest:
            ok[p] = rest[rest.index("--pid") + 1] == "1"
        else:
            ok[p] = all(a in rest for a in given)
    return ok


def failed(checks):
    """The checks (holds, what[, detail]) that do not hold, as text."""
    out = []
    for holds, what, *detail in checks:
        if not holds:
            out.append("%s (%s)" % (what, detail[0]) if detail and detail[0] else what)
    return out


def manifests():
    yaml = yaml_module()
    for path in PATHS:
        text = path.read_text()
        yield path, text, list(yaml.safe_load_all(text))


def templates():
    for path, _, docs in manifests():
        configmaps = {d["metadata"]["name"] for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"}
        for name, meta, spec in pod_templates(docs):
            yield path, configmaps, name, meta, spec


def test_every_manifest_has_a_pod_template_and_no_example_name_left():
    bad = failed([c for path, text, docs in manifests()
                  for c in ((list(pod_templates(docs)), f"{path.name}: has a pod template"),
                            ("example" not in text, f"{path.name}: no example.* name is left"))])
    assert not bad, bad


def test_every_pod_template_meets_pod_security_restricted():
    bad = failed([c for path, _, name, meta, spec in templates() for c in restricted(f"{path.name} {name}", meta, spec)])
    assert not bad, bad


def test_every_mount_names_a_volume_every_container_an_image_and_every_configmap_is_in_the_manifest():
    checks = []
    for path, configmaps, name, meta, spec in templates():
        cs = list(containers(spec))
        vols = spec.get("volumes") or []
        names = {v["name"] for v in vols}
        mounts = {m["name"] for _, c in cs for m in c.get("volumeMounts") or []}
        cms = {v["configMap"]["name"] for v in vols if "configMap" in v}
        checks += [(mounts <= names, f"{name}: every mount names a volume of the pod", repr(mounts - names)),
                   (all(c.get("image") for _, c in cs), f"{name}: every container names an image"),
                   (cms <= configmaps, f"{name}: the ConfigMaps it mounts are in {path.name}", repr(cms - configmaps))]
    bad = failed(checks)
    assert not bad, bad


def test_every_sockferry_sidecar_probes_every_forward_it_was_given_and_is_a_native_sidecar():
    checks = []
    for _, _, name, _, spec in templates():
        relays = [(k, c) for k, c in containers(spec) if forwards_checked(c) is not None]
        checks.append((relays, f"{name}: has a sockferry relay"))
        for k, c in relays:
            probes = forwards_checked(c)
            checks.append((all(probes.values()), f"{name}: {c['name']}'s startup and liveness probes check every "
                           "forward it was given", repr(probes)))
            if k == "initContainers":
                checks.append((c.get("restartPolicy") == "Always", f"{name}: {c['name']} is a native sidecar "
                               "(an init container with restartPolicy: Always)"))
    bad = failed(checks)
    assert not bad, bad


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()))
