import { readFileSync } from "fs";

const ansi = /\x1b\[[0-9;]*m/g;
const stamp = /^\d{4}-\d{2}-\d{2}T[\d:.]+Z\s/;
const markers: [RegExp, string][] = [
  [/^FAILED (\S+)/, "test"],
  [/exit code 137|Killed/, "infra"],
  [/exceeded the maximum execution time/, "timeout"],
  [/npm ERR!|Could not resolve dependencies|ResolutionImpossible/, "dependency"],
  [/error\[E\d+\]|error TS\d+|SyntaxError/, "build"],
  [/Traceback \(most recent call last\)|Error:/, "test"],
];

const lines = readFileSync(process.argv[2], "utf8").split("\n").map((l) => l.replace(ansi, "").replace(stamp, ""));
const failing = lines.flatMap((l) => (l.match(/^FAILED (\S+)/) ? [l.slice(7).split(" ")[0]] : []));
for (let i = 0; i < lines.length; i++) {
  const hit = markers.find(([re]) => re.test(lines[i]));
  if (hit) {
    console.log(JSON.stringify({ category: hit[1], line: i + 1, excerpt: lines.slice(Math.max(0, i - 8), i + 12) }, null, 2));
    break;
  }
}
console.log(JSON.stringify({ failing_tests: failing }));
