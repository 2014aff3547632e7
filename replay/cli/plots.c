/* --plots: per scale the hit-ratio series and the TTFT CDF of every
 * policy, and p99 TTFT against the offered load; gnuplot data, a script,
 * and the PNGs when gnuplot is installed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define CDF_POINTS 1000 /* points per TTFT CDF */

static FILE *open_in(const char *dir, const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    return fopen(path, "w");
}

/* Per scale: the hit-ratio series and the TTFT CDF of every policy, one
 * gnuplot data block (index) per policy; then p99 against load. */
static int write_plot_data(const runner *r, const series *all, size_t n, const char *dir)
{
    char path[4096], name[64];
    int bad = 0;
    for (size_t j = 0; j < r->s->scales.n; j++) {
        snprintf(name, sizeof name, "data_%zu.dat", j);
        FILE *f = open_in(dir, name, path, sizeof path);
        if (!f)
            return -1;
        for (size_t i = 0; i < n; i++) { /* hit series: blocks 0 .. n-1 */
            const cr_replay_result *x = &all[i].at[j];
            for (size_t w = 0; w < x->n_windows; w++)
                fprintf(f, "%.9g %.9g\n", ((double)w + 0.5) * x->window_s, x->hit_series[w]);
            fprintf(f, "\n\n");
        }
        for (size_t i = 0; i < n; i++) { /* CDFs: blocks n .. 2n-1 */
            const cr_replay_result *x = &all[i].at[j];
            for (size_t q = 0; q <= CDF_POINTS; q++) {
                size_t k = (size_t)((double)q / CDF_POINTS * (double)(x->requests - 1));
                fprintf(f, "%.9g %.9g\n", x->ttft_sorted_ms[k], (double)(k + 1) / x->requests);
            }
            fprintf(f, "\n\n");
        }
        bad |= fclose(f) != 0;
    }
    FILE *f = open_in(dir, "capacity.dat", path, sizeof path);
    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < r->s->scales.n; j++)
            fprintf(f, "%.9g %.9g\n", cli_offered_load(r, r->s->scales.v[j]),
                    all[i].at[j].ttft_p99_ms);
        fprintf(f, "\n\n");
    }
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

static void plot_lines(FILE *g, const series *all, size_t n, const char *file, size_t first,
                       const char *using_)
{
    fprintf(g, "plot ");
    for (size_t i = 0; i < n; i++)
        fprintf(g, "%s'%s' index %zu using %s with lines lw 2 lc %zu title '%s'", i ? ", " : "",
                file, first + i, using_, i + 1, cli_policy_name(all[i].policy));
    fprintf(g, "\n");
}

static int write_plot_script(const runner *r, const series *all, size_t n, const char *dir)
{
    char path[4096];
    FILE *g = open_in(dir, "plots.gp", path, sizeof path);
    if (!g)
        return -1;
    fprintf(g, "# " TOOL ": gnuplot plots.gp, from this folder\n"
               "set terminal pngcairo size 1000,620 noenhanced\nset key outside right\n"
               "set grid\n");
    for (size_t j = 0; j < r->s->scales.n; j++) {
        char data[64];
        double sc = r->s->scales.v[j];
        snprintf(data, sizeof data, "data_%zu.dat", j);
        fprintf(g, "set output 'hit_ratio_%zu.png'\nset title 'served hit ratio over time, "
                   "scale %g (%.3f req/s)'\nset xlabel 'virtual time (s)'\nset ylabel 'hit "
                   "ratio per %g s'\nunset logscale\nset yrange [0:1]\n",
                j, sc, cli_offered_load(r, sc), r->s->series_window_s);
        plot_lines(g, all, n, data, 0, "1:2");
        fprintf(g, "set output 'ttft_cdf_%zu.png'\nset title 'TTFT CDF, scale %g (%.3f "
                   "req/s)'\nset xlabel 'TTFT (ms)'\nset ylabel 'share of requests'\nset "
                   "logscale x\nset yrange [0:1]\n",
                j, sc, cli_offered_load(r, sc));
        plot_lines(g, all, n, data, n, "1:2");
    }
    fprintf(g, "set output 'capacity.png'\nset title 'p99 TTFT against offered load; SLO %g "
               "ms'\nset xlabel 'offered load (req/s)'\nset ylabel 'p99 TTFT (ms)'\nunset "
               "logscale\nset logscale y\nset autoscale y\n",
            r->s->slo_p99_ms);
    for (size_t i = 0; i < n; i++) /* each policy's capacity, marked on the SLO line */
        if (all[i].cap.req_per_s > 0)
            fprintf(g, "set label %zu '%s' at %.9g,%.9g point pt 7 ps 1.5 rotate by 60 offset "
                       "0.5,0.5\n",
                    i + 1, cli_policy_name(all[i].policy), all[i].cap.req_per_s, r->s->slo_p99_ms);
    fprintf(g, "plot %.9g with lines dt 2 lw 2 lc rgb 'black' title 'SLO'", r->s->slo_p99_ms);
    for (size_t i = 0; i < n; i++) /* the same colour per policy in every plot */
        fprintf(g, ", 'capacity.dat' index %zu using 1:2 with linespoints lw 2 lc %zu title '%s'",
                i, i + 1, cli_policy_name(all[i].policy));
    fprintf(g, "\n");
    return fclose(g) == 0 ? 0 : -1;
}

/* Runs gnuplot on plots.gp in dir. 0 on success, 127 when there is no
 * gnuplot, else its failure. */
static int run_gnuplot(const char *dir)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        execlp("gnuplot", "gnuplot", "plots.gp", (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int cli_write_plots(const runner *r, const series *all, size_t n)
{
    const char *dir = r->s->plots;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, TOOL ": --plots %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (write_plot_data(r, all, n, dir) != 0 || write_plot_script(r, all, n, dir) != 0) {
        fprintf(stderr, TOOL ": --plots %s: cannot write the plot files\n", dir);
        return -1;
    }
    int rc = run_gnuplot(dir);
    if (rc == 127)
        fprintf(stderr, TOOL ": warning: gnuplot not found (Debian package gnuplot-nox): %s "
                        "holds the plot data and plots.gp, no PNGs\n", dir);
    else if (rc != 0)
        fprintf(stderr, TOOL ": warning: gnuplot failed (%d) on %s/plots.gp\n", rc, dir);
    return 0;
}
