package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one bar per group.
type series struct {
	name   string
	values []float64 // per group; NaN draws no bar
}

// refLine is a reference level per group (fio, Belady), drawn as a dashed
// horizontal segment across the group's bars.
type refLine struct {
	name   string
	values []float64 // per group; NaN draws nothing
}

// groupedBars writes a PNG bar chart: for each group (x), one bar per series,
// and each reference as a black dashed segment over the group.
func groupedBars(path, title, ylabel string, groups []string, ss []series, refs []refLine) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	const groupWidth = 0.8
	// About 430 points of data area across len(groups) slots; bars fill
	// groupWidth of their slot.
	w := vg.Points(groupWidth * 430 / float64(len(groups)) / float64(max(len(ss), 1)))
	if w > 40 {
		w = 40
	}
	ymax := 0.0
	for i, s := range ss {
		vals := make(plotter.Values, len(groups))
		for g := range groups {
			v := 0.0
			if g < len(s.values) && !math.IsNaN(s.values[g]) {
				v = s.values[g]
			}
			vals[g] = v
			ymax = math.Max(ymax, v)
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return fmt.Errorf("bench: plot %s: %w", title, err)
		}
		b.LineStyle.Width = vg.Length(0)
		b.Color = plotutil.Color(i)
		b.Offset = vg.Length(float64(i)-float64(len(ss)-1)/2) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	for ri, r := range refs {
		var first *plotter.Line
		for g := range groups {
			if g >= len(r.values) || math.IsNaN(r.values[g]) {
				continue
			}
			v := r.values[g]
			ymax = math.Max(ymax, v)
			l, err := plotter.NewLine(plotter.XYs{{X: float64(g) - groupWidth/2, Y: v}, {X: float64(g) + groupWidth/2, Y: v}})
			if err != nil {
				return fmt.Errorf("bench: plot %s: %w", title, err)
			}
			l.LineStyle.Width = vg.Points(2)
			l.LineStyle.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			l.LineStyle.Color = refColor(ri)
			p.Add(l)
			if first == nil {
				first = l
			}
		}
		if first != nil {
			p.Legend.Add(r.name, first)
		}
	}
	p.NominalX(groups...)
	p.X.Min = -0.5
	p.X.Max = float64(len(groups)) - 0.5
	p.Y.Max = ymax * 1.25
	if p.Y.Max == 0 {
		p.Y.Max = 1
	}
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	p.Legend.XOffs = vg.Points(4)
	p.Legend.YOffs = -vg.Points(2)
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	return nil
}

func refColor(i int) color.Color {
	cs := []color.Color{color.Black, color.RGBA{R: 200, A: 255}, color.RGBA{G: 120, B: 200, A: 255}}
	return cs[i%len(cs)]
}

// writePlots draws every result's charts into dir.
func writePlots(dir string, rep *report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: --plot: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bench: --plot: %w", err)
	}
	var files []string
	for _, r := range rep.Results {
		if r.charts == nil {
			continue
		}
		fs, err := r.charts(abs)
		if err != nil {
			return files, err
		}
		files = append(files, fs...)
	}
	return files, nil
}
