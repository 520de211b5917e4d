#!/usr/bin/env node
const fs = require("fs");

const commits = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const vIdx = process.argv.indexOf("--version");
const version = vIdx > 0 ? process.argv[vIdx + 1] : "UNRELEASED";
const hidden = new Set(["chore", "ci", "test", "build", "refactor", "style"]);
const groups = { "Breaking changes": [], Added: [], Fixed: [], Changed: [], Security: [] };

for (const c of commits) {
  if (hidden.has(c.type) && !c.breaking) continue;
  const line = `- ${c.subject}${c.pr ? ` (#${c.pr})` : ""}`;
  if (c.breaking) groups["Breaking changes"].push(line);
  else if (c.type === "feat") groups.Added.push(line);
  else if (c.type === "fix") groups.Fixed.push(line);
  else if (c.type === "security") groups.Security.push(line);
  else groups.Changed.push(line);
}
const today = new Date().toISOString().slice(0, 10);
let out = `## [${version}] - ${today}\n`;
for (const [title, items] of Object.entries(groups)) {
  if (items.length) out += `\n### ${title}\n${items.join("\n")}\n`;
}
process.stdout.write(out);
