// graphile_add_jobs.mjs - the bulk enqueue baseline of bench/enqueue.sh: graphile-worker's own
// client adds the payloads of a pgpace JSON-lines file as jobs in one addJobs call (one
// statement, one transaction), COPIES jobs a line (default 1: the fan-out comparison adds one
// per endpoint), and prints the seconds the call took. Its schema is installed first and not
// timed.
//
//   node graphile_add_jobs.mjs POSTGRES_URL FILE.jsonl [COPIES]
import { readFileSync } from "node:fs";
import { makeWorkerUtils } from "graphile-worker";

const [url, file, copiesArg] = process.argv.slice(2);
const copies = Number(copiesArg ?? 1);
const specs = readFileSync(file, "utf8")
  .split("\n")
  .filter((line) => line.length > 0)
  .flatMap((line) => {
    const payload = JSON.parse(line).payload;
    return Array.from({ length: copies }, (_, i) => ({ identifier: `bench${i}`, payload }));
  });
const utils = await makeWorkerUtils({ connectionString: url });
try {
  await utils.migrate();
  const t0 = process.hrtime.bigint();
  const jobs = await utils.addJobs(specs);
  const t1 = process.hrtime.bigint();
  if (jobs.length !== specs.length) {
    throw new Error(`addJobs returned ${jobs.length} jobs for ${specs.length} specs`);
  }
  console.log((Number(t1 - t0) / 1e9).toFixed(3));
} finally {
  await utils.release();
}
