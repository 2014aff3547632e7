#!/usr/bin/env node
// Validates Kubernetes manifests (multi-document YAML, e.g. `helm template`
// output) against the Kubernetes API schemas of the kubernetes-models
// packages, the Prometheus Operator CRDs included, and against the JSON
// Schemas in schemas/ (named <group>_<version>_<Kind>.json) for the custom
// resources kubernetes-models lacks (GIE's InferencePool), checked with ajv.
//
//   node validate.cjs [--modules DIR] [--no-strict] [--quiet] FILE|- [FILE...]
//
// --modules DIR  node_modules holding kubernetes-models (default:
//                $CR_NODE_MODULES, else $CR_TOOLS_DIR/npm/node_modules, else
//                <repo>/.tools/npm/node_modules; scripts/helm-tools.sh installs it)
// --no-strict    accept fields the schema does not know
//
// Each object is checked by its class's validate() (types, required fields,
// formats, enums). The schemas do not forbid unknown fields, so in strict mode
// (the default, as the API server's fieldValidation=Strict) every field the
// validator never looked at is reported as unknown: objects are wrapped in
// Proxies that record which properties the compiled schema reads. Exit status:
// 0 all valid, 1 some object invalid, 2 usage or set-up error.
'use strict';

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

function usage(msg) {
  if (msg) process.stderr.write(`validate: ${msg}\n`);
  process.stderr.write('usage: validate.cjs [--modules DIR] [--no-strict] [--quiet] FILE|- [FILE...]\n');
  process.exit(2);
}

let modulesDir = process.env.CR_NODE_MODULES || '';
let strict = true;
let quiet = false;
const files = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--modules') {
    if (i + 1 >= argv.length) usage('--modules needs a directory');
    modulesDir = argv[++i];
  } else if (a === '--no-strict') strict = false;
  else if (a === '--quiet') quiet = true;
  else if (a === '-h' || a === '--help') usage();
  else if (a.startsWith('--')) usage(`unknown option ${a}`);
  else files.push(a);
}
if (files.length === 0) usage('no input');
if (!modulesDir) {
  const tools = process.env.CR_TOOLS_DIR || path.resolve(__dirname, '..', '..', '.tools');
  modulesDir = path.join(tools, 'npm', 'node_modules');
}
if (!fs.existsSync(path.join(modulesDir, 'kubernetes-models'))) {
  process.stderr.write(`validate: kubernetes-models not found in ${modulesDir}; run scripts/helm-tools.sh\n`);
  process.exit(2);
}
// Resolve packages as if from a file inside the tools' npm project.
const req = createRequire(path.join(path.dirname(modulesDir), 'package.json'));
const YAML = req('yaml');

// apiVersion -> package path prefix of its classes.
function modelPath(apiVersion, kind) {
  if (!/^[A-Za-z0-9]+$/.test(kind || '')) return null;
  if (apiVersion === 'v1') return `kubernetes-models/v1/${kind}`;
  if (/^monitoring\.coreos\.com\/v1(alpha1|beta1)?$/.test(apiVersion)) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  if (/^[a-z0-9.-]+\/v[0-9a-z]+$/.test(apiVersion || '')) return `kubernetes-models/${apiVersion}/${kind}`;
  return null;
}

function loadModel(apiVersion, kind) {
  const p = modelPath(apiVersion, kind);
  if (!p) return null;
  try {
    const mod = req(p);
    return mod[kind] || null;
  } catch (e) {
    if (e.code === 'MODULE_NOT_FOUND' || e.code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') return null;
    throw e;
  }
}

// A validator for apiVersion/kind from schemas/, or null. Its unknown fields
// are the schema's additionalProperties errors, kept apart so that
// --no-strict can drop them.
const localValidators = new Map();
function loadLocal(apiVersion, kind) {
  const file = path.join(__dirname, 'schemas', `${String(apiVersion).replace('/', '_')}_${kind}.json`);
  if (!/^[a-z0-9.-]+\/v[0-9a-z]+$/.test(apiVersion || '') || !/^[A-Za-z0-9]+$/.test(kind || '') ||
      !fs.existsSync(file)) {
    return null;
  }
  if (!localValidators.has(file)) {
    const Ajv = req('ajv').default;
    const ajv = new Ajv({ allErrors: true, strict: false });
    localValidators.set(file, ajv.compile(JSON.parse(fs.readFileSync(file, 'utf8'))));
  }
  const check = localValidators.get(file);
  return (obj) => {
    if (check(obj)) return { problems: [], unknown: [] };
    const problems = [];
    const unknown = [];
    for (const e of check.errors) {
      if (e.keyword === 'additionalProperties') {
        unknown.push(`${e.instancePath.slice(1).replace(/\//g, '.')}${e.instancePath ? '.' : ''}${e.params.additionalProperty}`);
      } else if (e.keyword !== 'if') {
        problems.push(`${e.instancePath || '/'} ${e.message}`);
      }
    }
    return { problems, unknown };
  };
}

// Deep copy of `value` whose objects record, in `seen`, each own property the
// validator reads. `all` gets every property path.
function track(value, where, seen, all) {
  if (Array.isArray(value)) return value.map((v, i) => track(v, `${where}[${i}]`, seen, all));
  if (value === null || typeof value !== 'object') return value;
  const copy = {};
  for (const k of Object.keys(value)) {
    const p = `${where}.${k}`;
    all.push(p);
    copy[k] = track(value[k], p, seen, all);
  }
  const mark = (k) => {
    if (typeof k === 'string' && Object.prototype.hasOwnProperty.call(copy, k)) seen.add(`${where}.${k}`);
  };
  return new Proxy(copy, {
    get(t, k, r) { mark(k); return Reflect.get(t, k, r); },
    has(t, k) { mark(k); return Reflect.has(t, k); },
  });
}

function unknownFields(Model, obj) {
  const seen = new Set();
  const all = [];
  const proxied = track(obj, '', seen, all);
  Model.prototype.validate.call(proxied);
  const unknown = [];
  for (const p of all) {
    if (seen.has(p)) continue;
    // Report the outermost unknown field only.
    if (unknown.some((u) => p.startsWith(`${u}.`) || p.startsWith(`${u}[`))) continue;
    unknown.push(p);
  }
  return unknown.map((p) => p.slice(1));
}

function readInput(f) {
  return f === '-' ? fs.readFileSync(0, 'utf8') : fs.readFileSync(f, 'utf8');
}

let failures = 0;
let count = 0;
const ids = new Map();
for (const f of files) {
  let docs;
  try {
    docs = YAML.parseAllDocuments(readInput(f));
  } catch (e) {
    process.stderr.write(`validate: ${f}: ${e.message}\n`);
    process.exit(2);
  }
  docs.forEach((doc, i) => {
    const where = `${f}#${i + 1}`;
    if (doc.errors && doc.errors.length) {
      failures++;
      process.stdout.write(`FAIL ${where}: YAML: ${doc.errors.map((e) => e.message).join('; ')}\n`);
      return;
    }
    const obj = doc.toJS({ maxAliasCount: -1 });
    if (obj === null || obj === undefined) return; // empty document
    count++;
    const name = (obj.metadata && obj.metadata.name) || '?';
    const label = `${obj.kind || '?'} ${obj.apiVersion || '?'} ${name}`;
    if (typeof obj !== 'object' || Array.isArray(obj) || !obj.apiVersion || !obj.kind) {
      failures++;
      process.stdout.write(`FAIL ${where}: not a Kubernetes object (no apiVersion/kind)\n`);
      return;
    }
    const Model = loadModel(obj.apiVersion, obj.kind);
    const local = Model ? null : loadLocal(obj.apiVersion, obj.kind);
    if (!Model && !local) {
      failures++;
      process.stdout.write(`FAIL ${where} ${label}: no schema for ${obj.apiVersion} ${obj.kind}\n`);
      return;
    }
    const id = `${obj.apiVersion}/${obj.kind}/${(obj.metadata && obj.metadata.namespace) || ''}/${name}`;
    if (ids.has(id)) {
      failures++;
      process.stdout.write(`FAIL ${where} ${label}: duplicate of ${ids.get(id)}\n`);
      return;
    }
    ids.set(id, where);
    const problems = [];
    if (local) {
      const r = local(obj);
      problems.push(...r.problems);
      if (strict && r.unknown.length) problems.push(`unknown field(s): ${r.unknown.join(', ')}`);
    } else {
      try {
        new Model(obj).validate();
      } catch (e) {
        problems.push(e.message);
      }
    }
    if (!local && problems.length === 0 && strict) {
      const unknown = unknownFields(Model, obj);
      if (unknown.length) problems.push(`unknown field(s): ${unknown.join(', ')}`);
    }
    if (problems.length) {
      failures++;
      process.stdout.write(`FAIL ${where} ${label}: ${problems.join('; ')}\n`);
    } else if (!quiet) {
      process.stdout.write(`ok   ${where} ${label}\n`);
    }
  });
}
process.stdout.write(`${count} object(s) checked, ${failures} invalid${strict ? ' (strict)' : ''}\n`);
process.exit(failures ? 1 : 0);
