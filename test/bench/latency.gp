# latency.gp — the latency-vs-load plot of bench_latency (docs/performance.md), from the data
# file the bench writes (build/bench/latency.dat: one block per path, one line per load:
#   path load_pct offered_per_s p50_us p99_us p999_us raw_p50_us raw_p99_us raw_p999_us)
# or from the medians of several runs (test/bench/latency_median.py). One panel per path: p99 and
# p99.9 of the path and of raw ZeroMQ request/reply at the same offered rate, against the load
# as a percentage of the rate the path sustains; log scale, milliseconds.
#
#   gnuplot -e "datafile='build/bench/latency.dat'; outfile='build/bench/latency.png'" \
#       test/bench/latency.gp
if (!exists("datafile")) datafile = 'build/bench/latency.dat'
if (!exists("outfile")) outfile = 'build/bench/latency.png'

# the paths in file order (the first word of every data line)
names = system("awk 'NF && $1 !~ /^#/ && $1 != last {printf \"%s \", $1; last = $1}' ".datafile)
n = words(names)
cols = 3
rows = int((n + cols - 1) / cols)

set terminal pngcairo size 1200, 330 * rows font "sans,9"
set output outfile
set logscale y
set format y "%g"
set grid ytics mytics xtics lc rgb "#dddddd"
set xrange [20:95]
set xtics (25, 50, 75, 90)
set key top left font "sans,8" samplen 2
set multiplot layout rows, cols title "Latency against offered load (open loop, from the intended send time): Shoal vs raw ZeroMQ request/reply at the same rate" font "sans,11"
do for [i = 1:n] {
    set title word(names, i) noenhanced
    set xlabel "load, % of the rate the path sustains"
    set ylabel "ms"
    plot datafile index (i - 1) using 2:($5 / 1000) with linespoints lw 2 pt 7 lc rgb "#c0392b" title "shoal p99", \
         ''       index (i - 1) using 2:($6 / 1000) with linespoints lw 1 pt 6 dt 2 lc rgb "#c0392b" title "shoal p99.9", \
         ''       index (i - 1) using 2:($8 / 1000) with linespoints lw 2 pt 5 lc rgb "#2471a3" title "raw p99", \
         ''       index (i - 1) using 2:($9 / 1000) with linespoints lw 1 pt 4 dt 2 lc rgb "#2471a3" title "raw p99.9"
}
unset multiplot
