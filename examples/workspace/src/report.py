"""Weekly stock report."""

from inventory import load, low_stock


def render(rows):
    # TODO: group by warehouse
    lines = [f"{r['sku']}: {r['count']}" for r in low_stock(rows)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(load("data/stock.csv")))
