#!/usr/bin/env python3
"""Turns deploy/kubernetes/*.yaml into pods `podman kube play` runs, one YAML file per pod.

Podman runs Pods (and ConfigMaps, PersistentVolumeClaims) but no controllers or Services, and
podman 4.3 lacks a few pod features; each change below is what Kubernetes itself would do, or
stands in for it, and nothing else in the pod templates changes:
  StatefulSet S   -> Pod S-0, its volumeClaimTemplates -> PersistentVolumeClaims <claim>-S-0
  Deployment D    -> Pods D-0 .. D-<n-1> (n: --replicas, else the manifest's replicas)
  Job J           -> Pod J (its template, restartPolicy Never)
  Service S       -> a hostAliases entry S -> the IP of the pod its selector picks, in every pod
  status.podIP    -> the pod's IP as a literal value (podman 4.3 refuses that fieldRef)
  $(VAR) in args  -> expanded from the container's env as the kubelet does (podman does not):
                     literal values, metadata.name, status.podIP, resourceFieldRef requests.cpu
  secret volumes  -> a hostPath folder holding the same files (podman 4.3 crashes on them)
Each pod gets an IP from --prefix (head-like pods first); `podman kube play --ip` assigns it.
Prints one line per pod, "pod NAME IP FILE KIND", in the order to start them (StatefulSets,
Deployments, Jobs), and one per podman volume the pods make, "volume NAME".
--slowdown POD=F (repeatable) adds `--slowdown F` to that pod's worker arguments: a pod that
emulates a slow machine, for a test that needs the job to outlast a join.
Usage: kube_pods.py MANIFEST_DIR OUT_DIR --prefix 10.89.1 --secret-dir DIR [--replicas N]
       [--job-steps N] [--slowdown POD=F ...]
"""
import argparse
import copy
import glob
import math
import os
import re
import sys

import yaml


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("manifests")
    parser.add_argument("out")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--secret-dir", required=True)
    parser.add_argument("--replicas", type=int)
    parser.add_argument("--job-steps", type=int)
    parser.add_argument("--slowdown", action="append", default=[], metavar="POD=F")
    args = parser.parse_args()
    slowdowns = {}
    for item in args.slowdown:
        pod, sep, factor = item.partition("=")
        if not sep or not pod or not factor:
            parser.error("--slowdown takes POD=F, got %r" % item)
        slowdowns[pod] = factor

    docs = []
    for path in sorted(glob.glob(os.path.join(args.manifests, "*.yaml"))):
        docs += [d for d in yaml.safe_load_all(open(path)) if d]
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    services = [d for d in docs if d["kind"] == "Service"]
    if args.job_steps:
        for cm in config_maps.values():
            for key, text in cm.get("data", {}).items():
                if key.endswith(".toml"):
                    cm["data"][key] = re.sub(r"(?m)^(\s*)steps = \d+",
                                             r"\g<1>steps = %d" % args.job_steps, text)

    pods = []  # (name, labels, spec, extra docs, kind)
    order = {"StatefulSet": 0, "Deployment": 1, "Job": 2}
    for d in sorted((d for d in docs if d["kind"] in order), key=lambda d: order[d["kind"]]):
        name = d["metadata"]["name"]
        template = d["spec"]["template"]
        labels = template.get("metadata", {}).get("labels", {})
        if d["kind"] == "StatefulSet":
            pod = name + "-0"
            spec = copy.deepcopy(template["spec"])
            extra = []
            for claim in d["spec"].get("volumeClaimTemplates", []):
                claim_name = "%s-%s" % (claim["metadata"]["name"], pod)
                extra.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": claim_name}, "spec": claim["spec"]})
                spec.setdefault("volumes", []).append(
                    {"name": claim["metadata"]["name"],
                     "persistentVolumeClaim": {"claimName": claim_name}})
            pods.append((pod, labels, spec, extra, d["kind"]))
        elif d["kind"] == "Deployment":
            replicas = args.replicas if args.replicas is not None else d["spec"].get("replicas", 1)
            for i in range(replicas):
                pods.append(("%s-%d" % (name, i), labels, copy.deepcopy(template["spec"]), [],
                             d["kind"]))
        else:
            spec = copy.deepcopy(template["spec"])
            spec["restartPolicy"] = "Never"
            pods.append((name, labels, spec, [], d["kind"]))

    ips = {pod[0]: "%s.%d" % (args.prefix, 10 + i) for i, pod in enumerate(pods)}
    aliases = []
    for service in services:
        selector = service["spec"].get("selector", {})
        chosen = [p[0] for p in pods if all(p[1].get(k) == v for k, v in selector.items())]
        if chosen:
            aliases.append({"ip": ips[chosen[0]], "hostnames": [service["metadata"]["name"]]})

    unknown = sorted(set(slowdowns) - set(ips))
    if unknown:
        parser.error("--slowdown names no pod of the manifests: %s" % ", ".join(unknown))
    os.makedirs(args.out, exist_ok=True)
    for name, labels, spec, extra, kind in pods:
        spec["hostAliases"] = spec.get("hostAliases", []) + aliases
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                volume.pop("secret")
                volume["hostPath"] = {"path": args.secret_dir, "type": "Directory"}
        used_maps = [v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v]
        for container in spec["containers"]:
            values = {}
            for env in container.get("env", []):
                source = env.get("valueFrom", {})
                ref = source.get("fieldRef", {}).get("fieldPath")
                resource = source.get("resourceFieldRef", {})
                if ref == "status.podIP":
                    env.pop("valueFrom")
                    env["value"] = ips[name]
                if "value" in env:
                    values[env["name"]] = env["value"]
                elif ref == "metadata.name":
                    values[env["name"]] = name
                elif resource.get("resource") == "requests.cpu":
                    values[env["name"]] = str(cpu_request(container))
            for key in ("command", "args"):
                if key in container:
                    container[key] = [expand(str(a), values) for a in container[key]]
            if name in slowdowns and container.get("args", [None])[0] == "worker":
                container["args"] += ["--slowdown", slowdowns[name]]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": labels}, "spec": spec}
        path = os.path.join(args.out, name + ".yaml")
        with open(path, "w") as out:
            yaml.safe_dump_all(extra + [config_maps[m] for m in used_maps] + [pod], out)
        print("pod", name, ips[name], path, kind)
        for doc in extra:
            print("volume", doc["metadata"]["name"])
        for m in used_maps:
            print("volume", m)


def cpu_request(container):
    """requests.cpu as the Downward API gives it with divisor 1: whole cores, rounded up."""
    text = str(container.get("resources", {}).get("requests", {}).get("cpu", "1"))
    cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    return max(1, math.ceil(cores))


def expand(text, values):
    """$(NAME) -> its value when NAME is known, as Kubernetes expands container arguments."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: values.get(m.group(1), m.group(0)), text)


if __name__ == "__main__":
    sys.exit(main())
