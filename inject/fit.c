/* Online fits for calibration: recursive least squares on relative errors,
 * with exponential forgetting, kept within bounds by an exact NNLS step.
 *
 * A sample is (x, y): y ms measured where the model says coef . x (prefill:
 * x = 1, L - s, L^2 - s^2; a line: 1, bytes). The fit minimises
 *
 *   J(t) = sum_i lambda^(n-i) ((y_i - x_i.t) / p_i)^2 + lambda^n prior(t)
 *
 * with p_i the prior model's prediction for x_i: relative errors, because
 * timing noise is multiplicative (5% of a 2 s prefill is 100 ms, of a 20 ms
 * one 1 ms): absolute least squares would fit the longest requests and
 * leave the short ones' percentage error to chance, and a percentage is
 * what adoption compares. Dividing by the prediction rather than by y_i
 * keeps a sample's weight independent of what was measured: divided by
 * y_i, a GPU turning 3x slower would send samples weighing 1/9 of the old
 * ones, and forgetting would follow the step several half-lives late.
 * Coefficients live in scaled units (x_j / scale_j about 1 at a typical
 * sample), which keeps P well conditioned in doubles.
 *
 * RLS keeps the unconstrained minimiser theta and P, the inverse of half
 * J's Hessian, so that J(t) = (t - theta)' P^-1 (t - theta) + const. The
 * bounded fit minimises that over t >= lower. For each set Z of
 * coefficients held at their bounds, the best t is t_F = theta_F - P_FZ
 * P_ZZ^-1 d_Z (d = theta - lower) at a cost of d_Z' P_ZZ^-1 d_Z; the
 * cheapest feasible one is the answer (the constrained optimum is the
 * optimum of its own face). At most 7 solves of at most 3x3, none while
 * theta is within bounds. theta itself is never clamped, so the bounds do
 * not bias what later samples add.
 *
 * The prior: theta starts at the prior model with a standard deviation of
 * 10 x (each coefficient + 1 ms per scaled unit): worth about one sample
 * with a 10% error, so a few samples outweigh it. Anti-windup: samples that
 * do not excite a direction (one request shape) let forgetting grow P along
 * it by 1/lambda per sample, without bound; P's trace is held to at most
 * its starting trace, and a P whose diagonal rounding made non-positive
 * restarts from a diagonal of that trace. */
#include "internal.h"

#include <math.h>
#include <string.h>

double cr_fit_eval(const cr_fit_kind *k, const double *coef, const double *x)
{
    double y = 0;
    for (size_t j = 0; j < k->dim; j++)
        y += coef[j] * x[j];
    return y;
}

double cr_fit_mape(const cr_fit *f) { return f->weight > 0 ? f->err_fit / f->weight : 0; }

double cr_fit_mape_prior(const cr_fit *f) { return f->weight > 0 ? f->err_prior / f->weight : 0; }

/* Solves a v = b in place (b becomes v) for a symmetric positive definite
 * n x n a, which it overwrites with its Cholesky factor; 0 when a is not
 * positive definite. */
static int cholesky_solve(double a[][CR_FIT_MAX], double *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j <= i; j++) {
            double s = a[i][j];
            for (size_t k = 0; k < j; k++)
                s -= a[i][k] * a[j][k];
            if (i > j)
                a[i][j] = s / a[j][j];
            else if (s > 0)
                a[i][i] = sqrt(s);
            else
                return 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < i; k++)
            b[i] -= a[i][k] * b[k];
        b[i] /= a[i][i];
    }
    for (size_t i = n; i-- > 0;) {
        for (size_t k = i + 1; k < n; k++)
            b[i] -= a[k][i] * b[k];
        b[i] /= a[i][i];
    }
    return 1;
}

/* With the coefficients of mask z at their bounds: the best offsets t from
 * the bounds and their cost; 0 when t leaves the bounds or P_ZZ is not
 * positive definite. */
static int face_optimum(const cr_fit *f, size_t d, const double *delta, unsigned z, double *t,
                        double *cost)
{
    size_t at[CR_FIT_MAX], nz = 0;
    double a[CR_FIT_MAX][CR_FIT_MAX], v[CR_FIT_MAX];
    for (size_t j = 0; j < d; j++) {
        if (z >> j & 1u)
            at[nz++] = j;
    }
    for (size_t r = 0; r < nz; r++) {
        for (size_t c = 0; c < nz; c++)
            a[r][c] = f->p[at[r]][at[c]];
        v[r] = delta[at[r]];
    }
    if (!cholesky_solve(a, v, nz))
        return 0;
    *cost = 0;
    for (size_t r = 0; r < nz; r++)
        *cost += delta[at[r]] * v[r];
    for (size_t j = 0; j < d; j++) {
        t[j] = 0;
        if (z >> j & 1u)
            continue;
        t[j] = delta[j];
        for (size_t r = 0; r < nz; r++)
            t[j] -= f->p[j][at[r]] * v[r];
        if (t[j] < 0)
            return 0;
    }
    return 1;
}

/* coef = the bounded minimiser of J (see the top of this file). */
static void project(cr_fit *f, const cr_fit_kind *k)
{
    size_t d = k->dim;
    double delta[CR_FIT_MAX], best[CR_FIT_MAX] = {0}, best_cost = INFINITY;
    int inside = 1;
    for (size_t j = 0; j < d; j++) {
        delta[j] = f->theta[j] - k->lower[j] * k->scale[j];
        inside &= delta[j] >= 0;
    }
    if (inside)
        memcpy(best, delta, d * sizeof *delta);
    for (unsigned z = 1; !inside && z < 1u << d; z++) {
        double t[CR_FIT_MAX], cost;
        if (face_optimum(f, d, delta, z, t, &cost) && cost < best_cost) {
            best_cost = cost;
            memcpy(best, t, d * sizeof *t);
        }
    }
    for (size_t j = 0; j < d; j++)
        f->coef[j] = best[j] / k->scale[j] + k->lower[j];
}

void cr_fit_start(cr_fit *f, const cr_fit_kind *k, const double *prior)
{
    memset(f, 0, sizeof *f);
    for (size_t j = 0; j < k->dim; j++) {
        f->theta[j] = prior[j] * k->scale[j];
        double sd = 10 * (fabs(f->theta[j]) + 1);
        f->p[j][j] = sd * sd;
        f->p_cap += sd * sd;
    }
    f->x_min = INFINITY;
    f->x_max = -INFINITY;
    project(f, k);
}

/* See the top of this file: a non-finite or non-positive diagonal restarts
 * P, a trace above p_cap scales it down. */
static void bound_covariance(cr_fit *f, size_t d)
{
    double trace = 0;
    int ok = 1;
    for (size_t i = 0; i < d; i++) {
        trace += f->p[i][i];
        ok &= f->p[i][i] > 0;
    }
    if (!ok || !isfinite(trace)) {
        memset(f->p, 0, sizeof f->p);
        for (size_t i = 0; i < d; i++)
            f->p[i][i] = f->p_cap / (double)d;
    } else if (trace > f->p_cap) {
        for (size_t i = 0; i < d; i++)
            for (size_t j = 0; j < d; j++)
                f->p[i][j] *= f->p_cap / trace;
    }
}

/* One RLS step on the row x / (scale norm) with target y / norm, forgetting
 * lambda: g = P phi, theta += g e / (lambda + phi' g), P = (P - g g' / den)
 * / lambda, written so that P stays exactly symmetric. */
static void rls_update(cr_fit *f, const cr_fit_kind *k, const double *x, double y, double norm,
                       double lambda)
{
    size_t d = k->dim;
    double phi[CR_FIT_MAX], g[CR_FIT_MAX], den = lambda, e = y / norm;
    for (size_t j = 0; j < d; j++)
        phi[j] = x[j] / (k->scale[j] * norm);
    for (size_t i = 0; i < d; i++) {
        g[i] = 0;
        for (size_t j = 0; j < d; j++)
            g[i] += f->p[i][j] * phi[j];
        den += phi[i] * g[i];
        e -= phi[i] * f->theta[i];
    }
    for (size_t i = 0; i < d; i++) {
        f->theta[i] += g[i] * e / den;
        for (size_t j = i; j < d; j++)
            f->p[i][j] = f->p[j][i] = (f->p[i][j] - g[i] * g[j] / den) / lambda;
    }
    bound_covariance(f, d);
}

static int spans(const cr_fit *f) { return f->x_max > 0 && f->x_max >= 4 * f->x_min; }

void cr_fit_add(cr_fit *f, const cr_fit_kind *k, const cr_fit_params *p, const double *x,
                double y, const double *prior)
{
    /* Scored before the sample moves the fit: errors on data it has not seen. */
    double predicted = cr_fit_eval(k, prior, x);
    f->err_fit = p->lambda * f->err_fit + fabs(cr_fit_eval(k, f->coef, x) - y) / y;
    f->err_prior = p->lambda * f->err_prior + fabs(predicted - y) / y;
    f->weight = p->lambda * f->weight + 1;
    rls_update(f, k, x, y, predicted > 0 ? predicted : y, p->lambda);
    project(f, k);
    f->n++;
    f->x_min = fmin(f->x_min, x[1]);
    f->x_max = fmax(f->x_max, x[1]);
    f->adopted = f->n >= p->min_samples && (!k->needs_span || spans(f)) &&
                 f->err_fit < f->err_prior;
}
